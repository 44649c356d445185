"""jobfeed's HTTP side: the JSON API, the SSE feeds and the web UI's files.

    from jobfeed.api import create_app, lifespan
"""

from .app import create_app, lifespan

__all__ = ["create_app", "lifespan"]
