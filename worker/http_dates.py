"""HTTP-date (RFC 9110, section 5.6.7) as a recipient must take it: the
IMF-fixdate (Sun, 06 Nov 1994 08:49:37 GMT) and the two obsolete forms, RFC
850 (Sunday, 06-Nov-94 08:49:37 GMT) and asctime (Sun Nov  6 08:49:37 1994),
case-sensitive, in GMT. Nothing else: email.utils also takes other zones,
lower case, a missing day name or seconds, which no HTTP server sends."""

from __future__ import annotations

import calendar
import re
import time

_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = "(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH = f"(?P<month>{'|'.join(_MONTHS)})"
_TIME = "(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_FORMS = tuple(re.compile(form) for form in (
    rf"{_DAY}, (?P<day>[0-9]{{2}}) {_MONTH} (?P<year>[0-9]{{4}}) {_TIME} GMT",  # IMF-fixdate
    rf"{_LONG_DAY}, (?P<day>[0-9]{{2}})-{_MONTH}-(?P<year>[0-9]{{2}}) {_TIME} GMT",  # RFC 850
    rf"{_DAY} {_MONTH} (?P<day>[0-9]{{2}}| [0-9]) {_TIME} (?P<year>[0-9]{{4}})",  # asctime
))


def http_date(text: str, now: float | None = None) -> float | None:
    """The Unix time an HTTP-date names, else None. now (Unix time) places an
    RFC 850 date's two-digit year: in the century that puts it at most 50
    years ahead."""
    for form in _FORMS:
        if (m := form.fullmatch(text)) is not None:
            break
    else:
        return None
    year, day = int(m["year"]), int(m["day"])
    hour, minute, second = int(m["hour"]), int(m["minute"]), int(m["second"])
    if len(m["year"]) == 2:
        this_year = time.gmtime(time.time() if now is None else now).tm_year
        year += this_year - this_year % 100
        if year > this_year + 50:
            year -= 100
    month = _MONTHS.index(m["month"]) + 1
    if not (1 <= year and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour <= 23 and minute <= 59 and second <= 60):  # 60: a leap second
        return None
    return float(calendar.timegm((year, month, day, hour, minute, second)))
