"""The byte unit the tests write memory figures in."""

GiB = 1 << 30
