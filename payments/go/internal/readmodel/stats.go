package readmodel

import (
	"cmp"
	"slices"
	"time"
)

const secondsPerDay = 86400

// Stats is the body of GET /v1/users/{id}/stats.
type Stats struct {
	UserID     string          `json:"user_id"`
	Seq        int64           `json:"seq"`
	Days       int             `json:"days"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	Currencies []CurrencyStats `json:"currencies"`
}

// CurrencyStats is the window's figures for one account.
type CurrencyStats struct {
	Currency          string              `json:"currency"`
	Count             int64               `json:"count"`
	TotalIn           int64               `json:"total_in"`
	TotalOut          int64               `json:"total_out"`
	ByCategory        []CategoryStats     `json:"by_category"`
	Daily             []DayStats          `json:"daily"`
	Amounts           *AmountStats        `json:"amounts"` // nil (null) when Count is 0
	TopCounterparties []CounterpartyStats `json:"top_counterparties"`
}

// CategoryStats is one category of a CurrencyStats.
type CategoryStats struct {
	Category string `json:"category"`
	Count    int64  `json:"count"`
	In       int64  `json:"in"`
	Out      int64  `json:"out"`
}

// DayStats is one UTC day of the dense daily series.
type DayStats struct {
	Date  string `json:"date"`
	Count int64  `json:"count"`
	In    int64  `json:"in"`
	Out   int64  `json:"out"`
}

// AmountStats are nearest-rank percentiles of the absolute amounts.
type AmountStats struct {
	P50 int64 `json:"p50"`
	P90 int64 `json:"p90"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// CounterpartyStats is one entry of the top counterparties.
type CounterpartyStats struct {
	Counterparty string `json:"counterparty"`
	Count        int64  `json:"count"`
	Volume       int64  `json:"volume"`
}

const maxCounterparties = 10

// dayOf is the UTC day number of a unix time (floor division, so times
// before 1970 land on the right day too).
func dayOf(ts int64) int64 {
	d := ts / secondsPerDay
	if ts%secondsPerDay < 0 {
		d--
	}
	return d
}

func dateOf(day int64) string {
	return time.Unix(day*secondsPerDay, 0).UTC().Format(time.DateOnly)
}

// Percentile is the SPEC's integer nearest-rank percentile of sorted (which
// must be sorted ascending and non-empty): a[max(ceil(p*n/100), 1) - 1].
func Percentile(sorted []int64, p int) int64 {
	k := (p*len(sorted) + 99) / 100
	return sorted[max(k, 1)-1]
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

type currencyAcc struct {
	out     *CurrencyStats
	byCat   map[string]*CategoryStats
	byCP    map[string]*CounterpartyStats
	amounts []int64
}

// ComputeStats computes the stats answer from a user's accounts (sorted
// currency codes) and transactions, against the ledger clock (not the wall
// clock), so the answer depends only on the ledger at seq.
func ComputeStats(userID string, seq, clock int64, days int, currencies []string, txns []Txn) Stats {
	toDay := dayOf(clock)
	fromDay := toDay - int64(days-1)
	st := Stats{
		UserID: userID, Seq: seq, Days: days,
		From: dateOf(fromDay), To: dateOf(toDay),
		Currencies: make([]CurrencyStats, len(currencies)),
	}

	dates := make([]string, days)
	for i := range dates {
		dates[i] = dateOf(fromDay + int64(i))
	}

	accs := make(map[string]*currencyAcc, len(currencies))
	for i, c := range currencies {
		cs := &st.Currencies[i]
		cs.Currency = c
		cs.Daily = make([]DayStats, days)
		for d := range cs.Daily {
			cs.Daily[d].Date = dates[d]
		}
		accs[c] = &currencyAcc{
			out:   cs,
			byCat: make(map[string]*CategoryStats),
			byCP:  make(map[string]*CounterpartyStats),
		}
	}

	for _, t := range txns {
		day := dayOf(t.TS)
		if day < fromDay || day > toDay {
			continue
		}
		acc, ok := accs[t.Currency]
		if !ok {
			continue // cannot happen: the model creates the account with its first row
		}
		in, out := int64(0), int64(0)
		if t.Amount >= 0 {
			in = t.Amount
		} else {
			out = -t.Amount
		}
		cs := acc.out
		cs.Count++
		cs.TotalIn += in
		cs.TotalOut += out

		cat := acc.byCat[t.Category]
		if cat == nil {
			cat = &CategoryStats{Category: t.Category}
			acc.byCat[t.Category] = cat
		}
		cat.Count++
		cat.In += in
		cat.Out += out

		ds := &cs.Daily[day-fromDay]
		ds.Count++
		ds.In += in
		ds.Out += out

		a := abs(t.Amount)
		acc.amounts = append(acc.amounts, a)
		cp := acc.byCP[t.Counterparty]
		if cp == nil {
			cp = &CounterpartyStats{Counterparty: t.Counterparty}
			acc.byCP[t.Counterparty] = cp
		}
		cp.Count++
		cp.Volume += a
	}

	for _, acc := range accs {
		cs := acc.out
		cs.ByCategory = make([]CategoryStats, 0, len(acc.byCat))
		for _, c := range acc.byCat {
			cs.ByCategory = append(cs.ByCategory, *c)
		}
		slices.SortFunc(cs.ByCategory, func(a, b CategoryStats) int { return cmp.Compare(a.Category, b.Category) })

		if len(acc.amounts) > 0 {
			slices.Sort(acc.amounts)
			cs.Amounts = &AmountStats{
				P50: Percentile(acc.amounts, 50),
				P90: Percentile(acc.amounts, 90),
				P99: Percentile(acc.amounts, 99),
				Max: acc.amounts[len(acc.amounts)-1],
			}
		}

		cs.TopCounterparties = make([]CounterpartyStats, 0, len(acc.byCP))
		for _, c := range acc.byCP {
			cs.TopCounterparties = append(cs.TopCounterparties, *c)
		}
		slices.SortFunc(cs.TopCounterparties, func(a, b CounterpartyStats) int {
			if c := cmp.Compare(b.Volume, a.Volume); c != 0 {
				return c
			}
			if c := cmp.Compare(b.Count, a.Count); c != 0 {
				return c
			}
			return cmp.Compare(a.Counterparty, b.Counterparty)
		})
		if len(cs.TopCounterparties) > maxCounterparties {
			cs.TopCounterparties = cs.TopCounterparties[:maxCounterparties]
		}
	}
	return st
}
