"""The HTTP helpers classify an upstream's answers the way the design says:
5xx, 429, timeouts and network errors transient; 404/410/422 permanent; 401/403
release. Against a real server on loopback."""

from __future__ import annotations

import asyncio
import socket
import time
from urllib.parse import quote, unquote

import httpx
import pytest

from jobfeed.worker.http_dates import http_date
from jobfeed.worker.tasks import Permanent, Release, Transient, check_response, http_errors


@pytest.fixture
async def upstream():
    """GET /<status>[?delay=s][&retry_after=v] answers that status."""
    async def handle(reader, writer):
        request = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = request.split(" ")[1]
        status, _, query = path.lstrip("/").partition("?")
        params = dict(p.split("=") for p in query.split("&") if p)
        await asyncio.sleep(float(params.get("delay", 0)))
        # percent-decoded, as the raw bytes they stand for: %B2 is the byte 0xB2, read as '²'
        retry_after = unquote(params["retry_after"], "latin-1") if "retry_after" in params else None
        extra = f"Retry-After: {retry_after}\r\n" if retry_after is not None else ""
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n"
                     .encode("latin-1"))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()


async def fetch(url: str, timeout: float = 5.0):
    async with httpx.AsyncClient(timeout=timeout) as client:
        with http_errors():
            return check_response(await client.get(url))


@pytest.mark.parametrize("status, error", [
    (500, Transient), (503, Transient), (429, Transient), (408, Transient),  # 408: a timeout
    (404, Permanent), (410, Permanent), (422, Permanent), (400, Permanent),
    (401, Release), (403, Release),
])
async def test_status_codes_are_classified(upstream, status, error):
    with pytest.raises(error) as caught:
        await fetch(f"{upstream}/{status}")
    assert caught.value.code == f"http_{status}"


async def test_success_passes_through(upstream):
    assert (await fetch(f"{upstream}/200")).status_code == 200


async def test_retry_after_is_honoured(upstream):
    with pytest.raises(Transient) as caught:
        await fetch(f"{upstream}/429?retry_after=42")
    assert caught.value.retry_after == 42


@pytest.mark.parametrize("status, error, header, after", [
    # neither seconds nor a date: as if none was sent, the status still decides
    (429, Transient, "soon-ish", None), (403, Release, "soon-ish", 60),
    # more than a job's run_after can hold: the longest delay jobfeed takes
    (503, Transient, "99999999999999", 10**9), (503, Transient, "9" * 400, 10**9),
    (403, Release, "0", 0),  # at once, as said: not the 60 s of no header
])
async def test_an_odd_retry_after_keeps_the_status_class(upstream, status, error, header, after):
    with pytest.raises(error) as caught:
        await fetch(f"{upstream}/{status}?retry_after={header}")
    assert type(caught.value) is error and caught.value.retry_after == after


# %B2: '²', a digit to str.isdigit()
@pytest.mark.parametrize("header", ["nan", "-1", "-5", "inf", "1e3", "1e400", "5.5", "+5", "0x10", "%B2"])
@pytest.mark.parametrize("status, error, after", [(503, Transient, None), (403, Release, 60)])
async def test_a_retry_after_that_is_not_delay_seconds_is_ignored(upstream, status, error, after, header):
    """RFC 9110's delay-seconds is digits only: a number Python's float() reads
    (NaN, negative, a fraction, an exponent) is neither it nor a date."""
    with pytest.raises(error) as caught:
        await fetch(f"{upstream}/{status}?retry_after={header}")
    assert type(caught.value) is error and caught.value.retry_after == after


DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _an_hour_ahead() -> dict[str, str]:
    """An hour from now in RFC 9110's three HTTP-date forms, and in forms
    email.utils also reads (other zones, case, no seconds, ...)."""
    t = time.gmtime(time.time() + 3600)
    month, hms = MONTHS[t.tm_mon - 1], f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    imf = f"{DAYS[t.tm_wday]}, {t.tm_mday:02d} {month} {t.tm_year} {hms} GMT"
    rfc850_date = f"{t.tm_mday:02d}-{month}-{t.tm_year % 100:02d} {hms} GMT"
    return {
        "imf-fixdate": imf,
        "rfc850": f"{LONG_DAYS[t.tm_wday]}, {rfc850_date}",
        "asctime": time.asctime(t),
        # odd forms
        "lower-case": imf.lower(),
        "no-day-name": imf.split(", ", 1)[1],
        "offset-zone": imf.replace("GMT", "+0000"),
        "utc-zone": imf.replace("GMT", "UTC"),
        "no-zone": imf.removesuffix(" GMT"),
        "no-seconds": imf.replace(f" {hms} ", f" {hms[:5]} "),
        "two-digit-year": imf.replace(f" {t.tm_year} ", f" {t.tm_year % 100:02d} "),
        "trailing-junk": imf + " soon",
        "rfc850-short-day": f"{DAYS[t.tm_wday]}, {rfc850_date}",
    }


@pytest.mark.parametrize("form", list(_an_hour_ahead()))
async def test_a_retry_after_date_is_taken_in_rfc_9110s_forms_only(upstream, form):
    """RFC 9110 5.6.7: a recipient takes IMF-fixdate, RFC 850 and asctime;
    anything else email.utils would read is ignored as any invalid value."""
    header = _an_hour_ahead()[form]
    with pytest.raises(Transient) as caught:
        await fetch(f"{upstream}/503?retry_after={quote(header, safe='')}")
    if form in ("imf-fixdate", "rfc850", "asctime"):
        assert caught.value.retry_after is not None and 3590 < caught.value.retry_after <= 3600, header
    else:
        assert caught.value.retry_after is None, header


def test_an_http_date_is_checked_field_by_field():
    in_2026 = 1_780_000_000.0
    assert http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777
    assert http_date("Sunday, 06-Nov-94 08:49:37 GMT", in_2026) == 784111777  # 2094 is over 50 years ahead
    assert http_date("Wednesday, 01-Jan-70 00:00:00 GMT", in_2026) == http_date("Wed, 01 Jan 2070 00:00:00 GMT")
    assert http_date("Sun Nov 16 08:49:37 1994") == 784111777 + 10 * 86400
    assert http_date("Wed, 31 Dec 2025 23:59:60 GMT") == http_date("Thu, 01 Jan 2026 00:00:00 GMT")  # a leap second
    for bad in ("Sat, 29 Feb 2025 00:00:00 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
                "Sun, 06 Nov 0000 08:49:37 GMT", "Sun, \u0660\u0666 Nov 1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994"):
        assert http_date(bad) is None, bad


def test_retry_after_raised_by_a_handler_is_bounded():
    assert Transient("x", retry_after=1e14).retry_after == 10**9
    assert Release("x", "y", -3).retry_after == 0
    with pytest.raises(TypeError, match="retry_after is seconds"):
        Release("x", "y", "5m")


def with_secrets(url: str) -> str:
    """The URL with credentials and a query holding a key, as handlers call APIs."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://user:s3cret@{rest}{'&' if '?' in rest else '?'}api_key=s3cret"


async def test_timeout_is_transient(upstream):
    with pytest.raises(Transient) as caught:
        await fetch(with_secrets(f"{upstream}/200?delay=2"), timeout=0.2)
    assert caught.value.code == "timeout"
    # the message names the request, without what the URL carries for it
    assert caught.value.message.startswith(f"GET http://***@{upstream.split('://')[1]}/200?***")
    assert "s3cret" not in str(caught.value)


async def test_connection_refused_is_transient():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Transient) as caught:
        await fetch(with_secrets(f"http://127.0.0.1:{port}/"))
    assert caught.value.code == "network_error"
    assert caught.value.message.startswith(f"GET http://***@127.0.0.1:{port}/?*** failed: ")
    assert "s3cret" not in str(caught.value)


async def test_a_status_error_names_the_request_without_its_secrets(upstream):
    """What is stored was always redacted; the exception itself is now too, for
    a handler that logs or re-raises it."""
    with pytest.raises(Transient) as caught:
        await fetch(with_secrets(f"{upstream}/503"))
    assert str(caught.value.message) == f"GET http://***@{upstream.split('://')[1]}/503?*** answered 503"
    assert "s3cret" not in str(caught.value)


async def test_raise_for_status_inside_http_errors_is_classified(upstream):
    async with httpx.AsyncClient() as client:
        with pytest.raises(Permanent):
            with http_errors():
                (await client.get(f"{upstream}/404")).raise_for_status()
