"""The web console of the fleet service: the fleet, its incidents' SLA clocks and every decision's reason.

Served by the status API's listener (``fleet serve``), rendered on the server with the project's own small
stylesheet and script and nothing from elsewhere, readable without script. See docs/console.md.
"""

from fleet.service.console.routes import Console

__all__ = ["Console"]
