package api

import (
	"fmt"
	"net/url"
	"strconv"
)

// query renders o as the log route's query parameters.
func (o LogOptions) query() url.Values {
	q := url.Values{"tail": {strconv.Itoa(o.Tail)}}
	if o.Container != "" {
		q.Set("container", o.Container)
	}
	for k, v := range map[string]bool{"follow": o.Follow, "previous": o.Previous, "timestamps": o.Timestamps} {
		if v {
			q.Set(k, "true")
		}
	}
	if o.SinceSeconds > 0 {
		q.Set("sinceSeconds", strconv.FormatInt(o.SinceSeconds, 10))
	}
	return q
}

// parseLogOptions reads the log route's query; the error wraps
// ErrBadRequest and names the parameter.
func parseLogOptions(q url.Values) (LogOptions, error) {
	o := LogOptions{Container: q.Get("container"), Tail: -1}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("%w: tail %q: want an integer (negative for all lines)", ErrBadRequest, v)
		}
		o.Tail = n
	}
	for k, p := range map[string]*bool{"follow": &o.Follow, "previous": &o.Previous, "timestamps": &o.Timestamps} {
		if v := q.Get(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%w: %s %q: want true or false", ErrBadRequest, k, v)
			}
			*p = b
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("%w: sinceSeconds %q: want a positive integer", ErrBadRequest, v)
		}
		o.SinceSeconds = n
	}
	if o.Follow && o.Previous {
		return o, fmt.Errorf("%w: follow and previous: a previous container writes no more", ErrBadRequest)
	}
	return o, nil
}
