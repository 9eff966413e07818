"""REST routers of the controller, one module per resource, mounted by ``controller.app``."""
