"""sketchql.service -- the HTTP service (FastAPI) and ``sketchql serve``.

``create_app(engine=None, demo=True, limits=Limits())`` builds the app
(:mod:`sketchql.service.app` lists the endpoints); ``sketchql serve`` runs it
with uvicorn on 127.0.0.1:8000 with the embedded demo.  FastAPI is imported
only when an app is created, so ``import sketchql.service`` stays light.
"""
from .limits import Limits

__all__ = ["Limits", "create_app"]


def create_app(*args, **kwargs):
    """See :func:`sketchql.service.app.create_app`."""
    from .app import create_app as _create

    return _create(*args, **kwargs)
