"""Node isolation: fault detection per instance and the incident state machine, as values.

detected -> acknowledged -> capacity_protected -> isolated (EnterStandby, drain) -> remediating (reboot +
health check + ExitStandby | RemoveInstances | hold for a human) -> remediated -> closed.

Acknowledging (the 15-minute response clock) and isolating (the 4-hour clock) run side by side: isolation
never waits for a human. Guardrails: at most ``max_isolated`` instances out at once, a breaker that stops
automatic isolation after too many incidents in a window (reset by a human only), and no node taken out while
that would break the floor: a replacement is surged and must be InService first.

The functions here mutate the (deep-copied) group history passed in by ``decide``; nothing else.

Where each decision is made:

- ``workflow.py``   ``run``: the tick, a short orchestrator over the steps below, in order
- ``operator.py``   operator actions (one handler per kind) and notifications as acknowledgments
- ``outcomes.py``   outcomes of actuated steps: reboots issued, failed steps asked again
- ``detection.py``  one detector per rule kind; incidents open or escalate
- ``events.py``     system events ECS scheduled ahead: recorded at once, isolated as their NotBefore nears
- ``health.py``     the health check after a reboot, one check per rule kind
- ``admission.py``  guardrails: the breaker and ``max_isolated``
- ``advance.py``    one handler per ``IncidentState``, dispatched from ``HANDLERS``
- ``sla.py``        the respond and isolate clocks
- ``pruning.py``    bookkeeping for the scaler and the history's retention
- ``shared.py``     what they share: constants, ``IsolationResult``, the ``Tick`` context, timeline helpers
"""

from policies.isolation.detection import Detection, detect
from policies.isolation.shared import (
    DAY_S,
    MAX_STEP_FAILURES,
    XID_SAME_EVENT_GAP_S,
    IsolationResult,
)
from policies.isolation.workflow import run

__all__ = [
    "DAY_S",
    "MAX_STEP_FAILURES",
    "XID_SAME_EVENT_GAP_S",
    "Detection",
    "IsolationResult",
    "detect",
    "run",
]
