"""L1: container and bare-host runtimes (only this package and devenv/remote import docker/paramiko)."""
