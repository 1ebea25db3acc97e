"""dates: date arithmetic over booking records (weekdays, nights across months and leap days).

Needs a program: ~80 bookings spanning several years (leap years included), a weekday
filter and day differences across month and year boundaries. The answer is computed here
from the drawn nights and a weekday by Sakamoto's formula, independently of the
references (which take date differences and weekdays from their date libraries).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
GUESTS = ("ada", "ben", "cy", "dora", "eli", "fay", "gus", "hana", "ivo", "jun", "kim", "lea")


@dataclass(frozen=True)
class DatesParams:
    n_bookings: int = 80  # data rows in bookings.csv
    first_year: int = 2019  # check-in dates fall in first_year ..
    n_years: int = 6  # .. first_year + n_years - 1
    max_nights: int = 30  # each stay lasts 1..max_nights nights


# Sakamoto's month offsets: the weekday shift each month's first day adds within a year.
MONTH_OFFSETS = (0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4)


def _weekday(day: date) -> int:
    """Monday=0 .. Sunday=6 by Sakamoto's formula from year, month and day alone."""
    year = day.year - (day.month < 3)  # January and February count with the previous year
    sunday_based = (year + year // 4 - year // 100 + year // 400 + MONTH_OFFSETS[day.month - 1] + day.day) % 7
    return (sunday_based + 6) % 7


def generate(rng: random.Random, p: DatesParams):
    first = date(p.first_year, 1, 1).toordinal()
    last = date(p.first_year + p.n_years - 1, 12, 31).toordinal()
    rows = []
    bookings = []
    base = rng.randint(100, 9000)
    for i in range(p.n_bookings):
        check_in = date.fromordinal(rng.randint(first, last))
        nights = rng.randint(1, p.max_nights)
        check_out = check_in + timedelta(days=nights)
        rows.append(f"B{base + i},{rng.choice(GUESTS)},{check_in.isoformat()},{check_out.isoformat()}")
        bookings.append((check_in, nights))
    chosen = sorted(rng.sample(range(7), rng.randint(1, 3)))
    names = [WEEKDAYS[d] for d in chosen]
    answer = sum(nights for check_in, nights in bookings if _weekday(check_in) in chosen)
    check_exact("dates", answer)
    instruction = (
        "`bookings.csv` has a header row and one booking per line: booking_id, guest, "
        "check_in and check_out, with dates written YYYY-MM-DD (Gregorian calendar). The "
        "number of nights of a booking is the number of days from check_in to check_out.\n"
        f"The answer is the total number of nights over the bookings whose check_in date "
        f"falls on a {' or '.join(names)}. The weekdays are also given in `query.txt` as "
        "`weekdays=<comma-separated English names>`. Print the answer as a decimal integer."
    )
    files = {
        "bookings.csv": "booking_id,guest,check_in,check_out\n" + "\n".join(rows) + "\n",
        "query.txt": query_file(weekdays=",".join(names)),
    }
    return instruction, files, answer, {"weekdays": names}


FAMILY = Family(
    name="dates",
    summary="booking records: total nights of stays checking in on chosen weekdays",
    params_type=DatesParams,
    limits={
        "n_bookings": (1, 300),
        "first_year": (1900, 2100),
        "n_years": (1, 50),
        "max_nights": (1, 400),
    },
    # Larger is harder in each; level 3 is the defaults (`tasks family=dates --params`).
    difficulty=Difficulty(
        harder={"n_bookings": 1, "n_years": 1, "max_nights": 1},
        levels=(
            {"n_bookings": 10, "n_years": 1, "max_nights": 7},
            {"n_bookings": 40, "n_years": 3, "max_nights": 14},
            {"n_bookings": 80, "n_years": 6, "max_nights": 30},
            {"n_bookings": 150, "n_years": 20, "max_nights": 120},
            {"n_bookings": 300, "n_years": 50, "max_nights": 400},
        ),
    ),
    generate=generate,
)
