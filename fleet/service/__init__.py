"""The fleet service: observe -> decide -> actuate -> record, with its store, lease, status API and
notifications (docs/service.md).
"""

from fleet.service.app import build_service, run_forever
from fleet.service.loop import Service, TickResult
from fleet.service.settings import ServiceSettings

__all__ = ["Service", "ServiceSettings", "TickResult", "build_service", "run_forever"]
