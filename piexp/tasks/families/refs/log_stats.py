# Reference for log_stats: busiest service at the queried level, then its total latency.
query = dict(line.strip().split("=", 1) for line in open("query.txt", encoding="utf-8") if "=" in line)
level = query["level"]
records = []
for line in open("server.log", encoding="utf-8"):
    parts = line.split()
    if len(parts) < 3:
        continue
    fields = dict(part.split("=", 1) for part in parts[3:] if "=" in part)
    records.append((parts[1], parts[2], int(fields["latency_ms"])))
counts = {}
for lvl, service, _ in records:
    if lvl == level:
        counts[service] = counts.get(service, 0) + 1
best = min(counts, key=lambda s: (-counts[s], s))
print(sum(latency for _, service, latency in records if service == best))
