"""What the tests share: servers and stand-ins they start, builders and REST helpers.

Nothing here is a test; test files import from here, never from one another.
"""
