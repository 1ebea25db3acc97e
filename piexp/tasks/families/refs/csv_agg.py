# Reference for csv_agg: filter by region and returned flag, group revenue by product.
import csv

query = dict(line.strip().split("=", 1) for line in open("query.txt", encoding="utf-8") if "=" in line)
regions = set(query["regions"].split(","))
totals = {}
with open("sales.csv", newline="", encoding="utf-8") as handle:
    for row in csv.DictReader(handle):
        if row["region"] in regions and row["returned"] == "no":
            revenue = int(row["quantity"]) * int(row["unit_price_cents"])
            totals[row["product"]] = totals.get(row["product"], 0) + revenue
print(max(totals.values()) - min(totals.values()))
