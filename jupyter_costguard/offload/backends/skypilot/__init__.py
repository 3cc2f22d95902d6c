"""The SkyPilot backend: jobs as SkyPilot managed jobs on spot GPUs in any cloud."""
