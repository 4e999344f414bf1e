package sqldb

// Rows are the rows a query gave, all read.
type Rows struct {
	// Columns are the column names, in order.
	Columns []string
	// Values holds one slice per row, in column order: int64, float64,
	// string, []byte or nil, as SQLite stored them.
	Values [][]any
}

// Len is the number of rows.
func (r *Rows) Len() int { return len(r.Values) }

// Maps gives each row as a map from column name to value.
func (r *Rows) Maps() []map[string]any {
	out := make([]map[string]any, len(r.Values))
	for i, row := range r.Values {
		m := make(map[string]any, len(r.Columns))
		for c, name := range r.Columns {
			m[name] = row[c]
		}
		out[i] = m
	}
	return out
}
