"""The client/server wire contract: every key that crosses the wire, in one place.

Each constant names a key of a fit/evaluate config (server -> client), a fit metric
(client -> server) or a client property (client -> server, asked by the oracle), with
its direction and meaning. Both sides import the key from here; neither types it as a
literal.
"""

from __future__ import annotations

# --------------------------------------------------------------- client -> server
PARTITION_ID = "partition-id"
"""property and fit metric (int): the client's partition id, 0..N-1. Oracles ask for it
with ``get_properties`` to know clients by id in every engine; strategies order results
by it so sums are the same whatever order replies arrive in."""
