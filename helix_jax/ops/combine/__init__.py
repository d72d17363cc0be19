"""LSE combine of attention partials."""
from .api import combine

__all__ = ["combine"]
