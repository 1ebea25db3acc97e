# Reference for arith: parse each expression (recursive descent), floor-mod its value,
# weight by line number. The modulus comes from query.txt, never from this program.
import re


def read_query(path="query.txt"):
    query = {}
    for line in open(path, encoding="utf-8"):
        if "=" in line:
            key, value = line.strip().split("=", 1)
            query[key] = value
    return query


def evaluate(text):
    tokens = re.findall(r"\d+|[-+*()]", text)
    pos = 0

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def atom():
        if peek() == "(":
            take()
            value = expr()
            take()  # ")"
            return value
        return int(take())

    def term():
        value = atom()
        while peek() == "*":
            take()
            value *= atom()
        return value

    def expr():
        value = term()
        while peek() in ("+", "-"):
            op = take()
            right = term()
            value = value + right if op == "+" else value - right
        return value

    return expr()


modulus = int(read_query()["modulus"])
lines = [line.strip() for line in open("expressions.txt", encoding="utf-8") if line.strip()]
total = 0
for i, line in enumerate(lines, start=1):
    total += i * (evaluate(line) % modulus)  # Python's % is already the floor remainder
print(total)
