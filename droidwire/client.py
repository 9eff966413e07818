"""The HTTP client every CLI noun shares: base URL, bearer header, typed errors, exit codes.

Client commands read ``DROIDWIRE_CONTROLLER`` (URL) and ``DROIDWIRE_TOKEN`` (docs/design.md §9),
or the ``--controller`` / ``--token`` options (prefer the variable for the token: a command
line is visible to every user of the machine in ``ps``). Several replicas' URLs may be given,
comma-separated (``url1,url2``): a call that cannot reach one goes to the next, which the
client then keeps using — a run is followed across replicas. A ``POST`` moves on only when
its connection failed (it never reached the controller), so nothing is submitted twice.

Exit codes (:class:`ExitCode`), the same for every noun, so CI can tell failures apart
(docs/cli.md#exit-codes)::

    0  ok                                  4  not found (404; a run that found no device)
    1  any other error; ``--fail-on``      5  controller or device unavailable (no
       matched a result                       connection, device offline or paused, 429,
    2  usage error (a bad flag or value,      503, 504; a run whose device was unavailable)
       also one the controller refuses     6  a run ended PENDING for another reason
       as a bad request, 400)
    3  unauthorized or forbidden (401, 403)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn
from urllib.parse import quote, urlsplit

import typer

if TYPE_CHECKING:
    import httpx  # imported where a call is made: `droidwire bridge` never loads it

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ENV_CONTROLLER",
    "ENV_TOKEN",
    "ApiError",
    "Client",
    "ControllerOption",
    "ExitCode",
    "JsonOption",
    "TokenOption",
    "call",
    "cli_errors",
    "fail",
    "list_command",
    "print_json",
    "show",
]

ENV_CONTROLLER = "DROIDWIRE_CONTROLLER"
ENV_TOKEN = "DROIDWIRE_TOKEN"
DEFAULT_TIMEOUT_S = 30.0
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    AUTH = 3
    NOT_FOUND = 4
    UNAVAILABLE = 5
    PENDING = 6


ControllerOption = Annotated[
    str | None,
    typer.Option(
        "--controller", envvar=ENV_CONTROLLER, help="Controller URL, e.g. http://127.0.0.1:8700."
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=ENV_TOKEN,
        show_default=False,
        help=f"API token (prefer the {ENV_TOKEN} variable: command lines show in ps).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


class ApiError(Exception):
    """A failed call: the controller's typed error, or no answer at all (status 0)."""

    def __init__(
        self, status: int, code: str, message: str, data: Mapping[str, Any] | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.data = dict(data or {})
        super().__init__(f"{code}: {message}")

    @property
    def exit_code(self) -> ExitCode:
        if self.code in ("usage", "bad_request") or self.status in (400, 422):
            return ExitCode.USAGE
        if self.status == 0 or self.status in (429, 503, 504) or self.code == "device_offline":
            return ExitCode.UNAVAILABLE
        if self.status in (401, 403):
            return ExitCode.AUTH
        if self.status == 404:
            return ExitCode.NOT_FOUND
        return ExitCode.ERROR


class Client:
    """A small synchronous client of the controller's REST API (``/v1/...`` paths)."""

    def __init__(
        self,
        base_url: str | None,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise ApiError(0, "usage", f"no controller: set {ENV_CONTROLLER} or pass --controller")
        urls = [u.strip().rstrip("/") for u in base_url.split(",") if u.strip()]
        if not urls or len(urls) > 16:
            raise ApiError(0, "usage", "give 1-16 controller URLs, comma-separated")
        if not token:
            raise ApiError(0, "usage", f"no token: set {ENV_TOKEN} or pass --token")
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ApiError(0, "usage", f"not an http(s) URL: {url!r}")
            if parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
                print(
                    f"warning: {parts.hostname} over plain http: your token travels unencrypted",
                    file=sys.stderr,
                )
        self.urls = urls
        self.base_url = urls[0]
        import httpx

        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
            follow_redirects=False,  # a redirect must never carry the bearer header elsewhere
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for an empty one), or :class:`ApiError`. Failing to
        reach the current controller, the call goes to the next URL (module docstring)."""
        import httpx

        start = self.urls.index(self.base_url)
        for attempt in range(len(self.urls)):
            url = self.urls[(start + attempt) % len(self.urls)]
            last = attempt == len(self.urls) - 1
            try:
                response = self._http.request(method, url + path, json=json_body, params=params)
            except httpx.TimeoutException as exc:
                if last or method != "GET":
                    raise ApiError(0, "timeout", f"no answer from {url}: {exc}") from exc
                continue
            except httpx.TransportError as exc:
                if last or not (method == "GET" or isinstance(exc, httpx.ConnectError)):
                    raise ApiError(0, "unavailable", f"cannot reach {url}: {exc}") from exc
                continue
            self.base_url = url
            break
        if response.status_code == 404 and _router_404(response):
            # No route at all (not "no such run"): the URL is not the controller's base URL.
            raise ApiError(
                0, "usage",
                f"nothing serves {path} at {self.base_url}: the controller URL "
                f"({ENV_CONTROLLER} or --controller) is its base URL, e.g. http://HOST:8700"
                + (f", without the path {urlsplit(self.base_url).path!r}"
                   if urlsplit(self.base_url).path not in ("", "/") else ""),
            )
        if response.is_success:
            if not response.content:
                return None
            try:
                return response.json()
            except ValueError as exc:
                raise ApiError(
                    response.status_code, "bad_response", "the controller sent something not JSON"
                ) from exc
        raise _error_from(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json_body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def upload(
        self,
        method: str,
        path: str,
        chunks: Iterable[bytes],
        size: int,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Send ``size`` bytes from ``chunks`` as the body (streamed, never whole in memory);
        the decoded JSON answer, or :class:`ApiError`. No deadline on the transfer itself.
        Sent to the controller in use (a streamed body cannot go to another URL after)."""
        import httpx

        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        try:
            response = self._http.request(
                method, self.base_url + path, content=chunks, headers=headers, params=params,
                timeout=httpx.Timeout(None, connect=DEFAULT_TIMEOUT_S),
            )
        except httpx.TransportError as exc:
            raise ApiError(0, "unavailable", f"cannot reach {self.base_url}: {exc}") from exc
        if not response.is_success:
            raise _error_from(response)
        return response.json() if response.content else None

    def download(
        self, path: str, sink: Callable[[bytes], object], *, params: Mapping[str, Any] | None = None
    ) -> int:
        """Stream a GET's body into ``sink`` chunk by chunk; the bytes received."""
        import httpx

        total = 0
        try:
            with self._http.stream(
                "GET", self.base_url + path, params=params,
                timeout=httpx.Timeout(None, connect=DEFAULT_TIMEOUT_S),
            ) as response:
                if not response.is_success:
                    response.read()
                    raise _error_from(response)
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    sink(chunk)
        except httpx.TransportError as exc:
            raise ApiError(0, "unavailable", f"cannot reach {self.base_url}: {exc}") from exc
        return total


def _router_404(response: httpx.Response) -> bool:
    """A 404 from the router (no such path), not from a handler (no such run, device …)."""
    try:
        body = response.json()
    except ValueError:
        return True  # not the controller's JSON at all
    if not isinstance(body, dict):
        return True
    error = body.get("error")
    if isinstance(error, dict):
        return error.get("message") == "Not Found"
    return body.get("detail") == "Not Found"


def _error_from(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        data = {k: v for k, v in error.items() if k not in ("code", "message")}
        return ApiError(response.status_code, str(error["code"]), str(error["message"]), data)
    except (ValueError, KeyError, TypeError, AttributeError):
        reason = response.reason_phrase or "error"
        return ApiError(response.status_code, "http_error", f"HTTP {response.status_code} {reason}")


def fail(error: ApiError) -> NoReturn:
    """Print a typed error on stderr and exit with its code."""
    print(f"error: {error.code}: {error.message}", file=sys.stderr)
    for key, value in error.data.items():
        print(f"  {key}: {value if isinstance(value, str) else json.dumps(value)}", file=sys.stderr)
    raise typer.Exit(int(error.exit_code))


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn :class:`ApiError` raised inside into a printed message and an exit code."""
    try:
        yield
    except ApiError as error:
        fail(error)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


def call(
    controller: str | None,
    token: str | None,
    method: str,
    path: str,
    *ids: str,
    body: Any = None,
    params: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """One REST call the way every client command makes it: the controller and token from its
    options (or the environment), each of ``ids`` quoted whole into a ``{}`` of ``path``, and
    a failure printed with its exit code (docs/cli.md#exit-codes). The decoded answer."""
    url = path.format(*(quote(i, safe="") for i in ids))
    with cli_errors(), Client(controller, token, timeout=timeout) as client:
        return client.request(method, url, json_body=body, params=params or None)


def show(value: Any, json_out: bool, human: Callable[[Any], object]) -> None:
    """``--json``: ``value`` as JSON on stdout; otherwise ``human(value)``."""
    if json_out:
        print_json(value)
    else:
        human(value)


def list_command(
    app: typer.Typer, path: str, human: Callable[[list[dict[str, Any]]], object], help: str
) -> None:
    """Give ``app`` its ``list`` command: ``GET path``, shown as JSON (``--json``) or by
    ``human``, with the usual ``--controller`` and ``--token``."""

    def list_(
        json_out: JsonOption = False,
        controller: ControllerOption = None,
        token: TokenOption = None,
    ) -> None:
        show(call(controller, token, "GET", path), json_out, human)

    app.command("list", help=help)(list_)

