"""DynamicResources: DRA device allocation for pods' ResourceClaims."""

from .plugin import DynamicResources

__all__ = ["DynamicResources"]
