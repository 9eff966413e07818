"""Services: what a REST handler and an MCP tool both do, called with the caller's principal
and the app's state, never an HTTP request (REST and MCP share one layer, not each other's
handlers). :mod:`.agent` — the agent toolkit."""
