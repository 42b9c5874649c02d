package urltpl_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/handler/urltpl"
)

func TestTextTemplate(t *testing.T) {
	var doc any
	d := json.NewDecoder(strings.NewReader(`{"shop": "a.myshopify.com", "n": 12, "o": {}, "e": "", "s": "x y>*"}`))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ tpl, want, err string }{
		{"orders.{/shop}", "orders.a%2Emyshopify%2Ecom", ""},
		{"orders.{/n}.{/s}", "orders.12.x%20y%3E%2A", ""},
		{"orders.{/o}", "", "placeholder {/o} resolves to an object"},
		{"orders.{/e}", "", `placeholder {/e} resolves to ""`},
		{"orders.{/missing}", "", "placeholder {/missing} resolves to nothing"},
	} {
		tp, err := urltpl.ParseText(tt.tpl)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tp.Expand(doc, urltpl.EscapeToken)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.tpl, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s = %q, %v; want %q", tt.tpl, got, err, tt.want)
		}
	}
	for _, bad := range []string{"a.{x}", "a.{/x", "a.}"} {
		if _, err := urltpl.ParseText(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
