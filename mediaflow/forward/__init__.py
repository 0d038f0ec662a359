"""Store and forward: an edge box captures into its own journal and store, and
forwards to the shared queue and artifact service whenever they answer.

On a box with ``MEDIAFLOW_FORWARD_QUEUE`` and ``MEDIAFLOW_FORWARD_STORE`` set,
``mediaflow run`` runs the flow's sources and the nodes marked ``edge = true``
on the box's embedded queue and local store, and a :class:`Forwarder` carries
the other nodes' work to the shared queue, each artifact uploaded before the
item that references it, in order per stream and exactly once (see
:mod:`mediaflow.forward.plan`). The flow's other nodes run where the work goes
(``mediaflow worker`` there).
"""

from mediaflow.forward.forwarder import Forwarder
from mediaflow.forward.running import Forwarding, forwarded_streams, start_forwarding
from mediaflow.forward.settings import ForwardSettings
from mediaflow.forward.status import ForwardStatus

__all__ = [
    "ForwardSettings",
    "ForwardStatus",
    "Forwarder",
    "Forwarding",
    "forwarded_streams",
    "start_forwarding",
]
