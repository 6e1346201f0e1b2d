"""devenv: a ready PyTorch GPU environment on any GPU machine you can SSH into."""

__version__ = "0.1.0"
