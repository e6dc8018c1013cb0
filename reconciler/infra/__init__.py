"""What every part of the shell stands on: logs, metrics, traces, the release's version and
serving an ASGI app on a socket. It imports nothing of the package but the pure core."""
