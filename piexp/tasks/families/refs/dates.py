# Reference for dates: nights = check_out - check_in in days, filtered by check-in weekday.
import csv
from datetime import date

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
query = dict(line.strip().split("=", 1) for line in open("query.txt", encoding="utf-8") if "=" in line)
wanted = {WEEKDAYS.index(name) for name in query["weekdays"].split(",")}
total = 0
with open("bookings.csv", newline="", encoding="utf-8") as handle:
    for row in csv.DictReader(handle):
        check_in = date.fromisoformat(row["check_in"])
        check_out = date.fromisoformat(row["check_out"])
        if check_in.weekday() in wanted:
            total += (check_out - check_in).days
print(total)
