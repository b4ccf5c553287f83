"""The fleet service: observe -> decide -> actuate -> record, with its store, lease, status API and
notifications (docs/service.md).
"""

from fleet.service.loop import Service, ServiceSettings, TickResult, build_service, run_forever

__all__ = ["Service", "ServiceSettings", "TickResult", "build_service", "run_forever"]
