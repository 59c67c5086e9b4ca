"""The API's two timestamp formats, for the objects troupe writes."""

from __future__ import annotations

import datetime


def now_rfc3339() -> str:
    """metav1.Time (conditions' lastTransitionTime): whole seconds."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """metav1.MicroTime (an Event's eventTime, a Lease's renewTime)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
