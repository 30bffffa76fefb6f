"""The ONLY package that talks to the Kubernetes API server.

Owns: reading a PDDeployment and the objects it owns (Deployments, Services and the
pods of its pools), the one Secret read (Prometheus credentials), and every write the
operator makes, each with the field manager ``pdscaler`` (``naming.FIELD_MANAGER``).
Must not: decide anything (the planner and the policy do), or swallow errors other
than NotFound on reads. Its modules, each importing only those above it here:

* ``client``: ``load_api_client``, the paths, and ``Client``, the transport every
  request goes through (``_call``: counted by verb and resource in ``request_counts``,
  and, except the Lease's, paced by a token bucket, ``limiter``, and retried with
  exponential backoff and jitter on 429, 5xx and connection errors); ``KubeError``;
* ``audit``: ``WriteAudit``, the record of every write (the lab tests count writes
  there to prove a converged tick makes none);
* ``cache``: ``Informer``, one watch cache per kind and namespace (list + watch of the
  objects labelled ``pdscaler.io/name``) that ``observe`` reads with ``cache=True``
  (``pdscaler run``), so a converged tick reads only its PDDeployment;
* ``reads``: ``Reads`` (a ``Client``): ``get_pdd``, ``observe``, ``read_secret``, the
  per-namespace informers;
* ``writes``: ``Kube`` (``Reads`` plus server-side apply, pod patches, deletes, the
  status patch, Events, the Lease), every write but the Lease's through
  ``Kube._write`` into ``Kube.audit``;
* ``fenced``: ``FencedKube``, whose writes happen only while this replica holds the
  Lease.

Built on the ``kubernetes`` client's ``ApiClient`` (its kubeconfig / in-cluster
loading, TLS and auth) with plain-dict bodies, so custom resources, apply patches and
Events go through one small path. The rest of the operator imports the names below
from ``pdscaler.kube``. Example::

    kube = Kube(load_api_client())
    pdd = kube.get_pdd("serving", "chat")      # None when it does not exist
    before = kube.audit.count
    ...                                         # one converged tick
    assert kube.audit.since(before) == []       # it wrote nothing
"""

from __future__ import annotations

from pdscaler.kube.audit import WriteAudit, WriteRecord
from pdscaler.kube.cache import (
    WATCH_BACKOFF_BASE_SECONDS,
    WATCH_BACKOFF_CAP_SECONDS,
    WATCH_TIMEOUT_SECONDS,
    Informer,
)
from pdscaler.kube.client import (
    APPLY_PATCH,
    DEFAULT_BURST,
    DEFAULT_QPS,
    JSON,
    MERGE_PATCH,
    REQUEST_TIMEOUT,
    RETRY_ATTEMPTS,
    RETRY_BASE_SECONDS,
    RETRY_CAP_SECONDS,
    RETRY_STATUSES,
    WATCH_READ_SLACK_SECONDS,
    Client,
    KubeError,
    Obj,
    RequestCounts,
    TokenBucket,
    backoff,
    load_api_client,
    request_kind,
)
from pdscaler.kube.fenced import FencedError, FencedKube
from pdscaler.kube.reads import (
    ABSENT_TTL_SECONDS,
    CACHED_KINDS,
    SYNC_TIMEOUT_SECONDS,
    CacheNotSyncedError,
    Reads,
)
from pdscaler.kube.writes import Kube, StaleCacheError

__all__ = [
    "ABSENT_TTL_SECONDS",
    "APPLY_PATCH",
    "CACHED_KINDS",
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "JSON",
    "MERGE_PATCH",
    "REQUEST_TIMEOUT",
    "RETRY_ATTEMPTS",
    "RETRY_BASE_SECONDS",
    "RETRY_CAP_SECONDS",
    "RETRY_STATUSES",
    "SYNC_TIMEOUT_SECONDS",
    "WATCH_BACKOFF_BASE_SECONDS",
    "WATCH_BACKOFF_CAP_SECONDS",
    "WATCH_READ_SLACK_SECONDS",
    "WATCH_TIMEOUT_SECONDS",
    "CacheNotSyncedError",
    "Client",
    "FencedError",
    "FencedKube",
    "Informer",
    "Kube",
    "KubeError",
    "Obj",
    "Reads",
    "RequestCounts",
    "StaleCacheError",
    "TokenBucket",
    "WriteAudit",
    "WriteRecord",
    "backoff",
    "load_api_client",
    "request_kind",
]
