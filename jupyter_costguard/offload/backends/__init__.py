"""Where jobs run: each backend implements `base.Backend` over one job spec and job directory."""
