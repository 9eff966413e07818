"""The app's services.

* :mod:`.container` — :class:`Services`: what the lifespan builds once (store, hub, executor,
  cluster, …) and passes around as one typed object, on ``app.state.services``; a route takes
  it with the :data:`AppServices` dependency, other code with :func:`services_of`.
* :mod:`.agent` — what a REST handler and an MCP tool both do for the agent toolkit, called
  with the caller's principal and the app's services, never an HTTP request (REST and MCP share
  one layer, not each other's handlers).
* :mod:`.runs` — reading runs (the listing, one run with its steps), the same way.
* :mod:`.manage` — apps and files on a device (loan scope, audit, streamed transfers), the
  same way.
"""

from controller.services.container import AppServices, Services, current_services, services_of

__all__ = ["AppServices", "Services", "current_services", "services_of"]
