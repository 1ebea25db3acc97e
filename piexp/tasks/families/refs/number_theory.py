# Reference for number_theory: sieve once, prefix sums of qualifying primes, sum per range.
query = dict(line.strip().split("=", 1) for line in open("query.txt", encoding="utf-8") if "=" in line)
k = int(query["k"])
ranges = [tuple(map(int, line.split())) for line in open("ranges.txt", encoding="utf-8") if line.strip()]
limit = max(b for _, b in ranges)
sieve = bytearray([1]) * (limit + 1)
sieve[0] = 0
if limit >= 1:
    sieve[1] = 0
for i in range(2, int(limit**0.5) + 1):
    if sieve[i]:
        sieve[i * i :: i] = bytearray(len(range(i * i, limit + 1, i)))
prefix = [0] * (limit + 1)
running = 0
for n in range(limit + 1):
    if sieve[n] and sum(map(int, str(n))) % k == 0:
        running += n
    prefix[n] = running
print(sum(prefix[b] - prefix[a - 1] for a, b in ranges))
