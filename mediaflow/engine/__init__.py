"""The engine: a pure scheduling core and the async shell that performs its decisions.

Decisions: :mod:`.reduce` is ``reduce(state, tick, now) -> (state, commands)``,
pure, with :mod:`.admission` (what to claim, and how much of a group commit to
claim at once) and :mod:`.control` (pause, step, stop, the backlog); every
scheduling fact lives in :mod:`.state`; :mod:`.ticks` and :mod:`.commands` are
its inputs and outputs, and :mod:`.trace` / :mod:`.replay` record a run's ticks
and replay them exactly.

Effects: :mod:`.runner` owns the state and applies commands through one part
per seam, which :mod:`.lifecycle` wires and sets up, reshapes and stops:
:mod:`.journal` (emissions, acks, latest values, committed in groups),
:mod:`.execution` (node tasks running batches), :mod:`.loops` (claim, commit,
leases, backlog), :mod:`.effects` (queue calls in flight), :mod:`.pins` (what
garbage collection must spare). :mod:`.session` runs a flow from start to clean
stop (:mod:`.outcome`: how it ended); :mod:`.snapshot` is all the outside (HTTP,
metrics) reads of a running flow. A store or queue that is away is no node's
failure: :mod:`.away` decides what that means, :mod:`.outages` makes a source's
saves wait for the store.

A chunk's way, connector to node: ``PortEmitter.emit`` -> ``RunContext.emit``
-> ``Journal.emit`` (buffered); the group commit (``Journal.flush``) ->
``WorkQueue.commit`` (claimed for this process in the same transaction) ->
``CommittedTick`` -> ``reduce`` (``StartNodeCommand``) -> ``NodeExecutor`` ->
the node's ``run``. Every part hands its ticks to the runner's one dispatch
(:data:`.commands.Dispatch`); none calls back into the runner otherwise.
"""
