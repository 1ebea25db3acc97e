# Reference for csv_agg: filter by region and returned flag, group revenue by product.
query = Dict{String,String}()
for line in eachline("query.txt")
    if occursin('=', line)
        key, value = split(strip(line), '='; limit=2)
        query[String(key)] = String(value)
    end
end
regions = Set(split(query["regions"], ','))
lines = filter(l -> !isempty(strip(l)), readlines("sales.csv"))
header = split(strip(lines[1]), ',')
col = Dict(String(name) => i for (i, name) in enumerate(header))
totals = Dict{String,Int64}()
for line in lines[2:end]
    f = split(strip(line), ',')
    if f[col["region"]] in regions && f[col["returned"]] == "no"
        revenue = parse(Int64, f[col["quantity"]]) * parse(Int64, f[col["unit_price_cents"]])
        product = String(f[col["product"]])
        totals[product] = get(totals, product, 0) + revenue
    end
end
println(maximum(values(totals)) - minimum(values(totals)))
