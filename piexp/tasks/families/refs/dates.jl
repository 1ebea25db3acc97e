# Reference for dates: nights = check_out - check_in in days, filtered by check-in weekday.
using Dates

query = Dict{String,String}()
for line in eachline("query.txt")
    if occursin('=', line)
        key, value = split(strip(line), '='; limit=2)
        query[String(key)] = String(value)
    end
end
NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]  # dayofweek order
wanted = Set(findfirst(==(String(name)), NAMES) for name in split(query["weekdays"], ','))
lines = filter(l -> !isempty(strip(l)), readlines("bookings.csv"))
header = split(strip(lines[1]), ',')
col = Dict(String(name) => i for (i, name) in enumerate(header))
total = 0
for line in lines[2:end]
    f = split(strip(line), ',')
    check_in = Date(String(f[col["check_in"]]))
    check_out = Date(String(f[col["check_out"]]))
    if dayofweek(check_in) in wanted
        global total += Dates.value(check_out - check_in)
    end
end
println(total)
