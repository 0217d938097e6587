// Command grpchealth is the gRPC health server of nodeguard's test images
// (/bin/grpchealth in the busybox image): the far end of the gRPC probes
// of the tests, whose status a test changes from inside the container by
// creating and removing files.
//
//	grpchealth [-port 9090] [SERVICE=FILE | SERVICE=!FILE]...
//
// It answers grpc.health.v1.Health/Check on every address of the port.
// Each argument names a service ("" before the = is the server's overall
// health) and a file: the service is SERVING while FILE exists (or, with
// !FILE, while it does not) and NOT_SERVING otherwise, looked at on every
// Check. A service not named is answered NOT_FOUND, as grpc-go's health
// server answers one it was never told of; every other method is
// UNIMPLEMENTED. It exits 0 on SIGTERM or SIGINT.
//
// lab/images builds it statically from this file, embedded in that
// package, without the module proxy: so it uses only the standard
// library, whose HTTP/2 server (unencrypted, with prior knowledge, as
// gRPC's plaintext transport speaks it) carries the protocol, and it
// encodes the two small protobuf messages itself.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// The health protocol's ServingStatus values (grpc_health_v1).
const (
	serving    = 1
	notServing = 2
)

// gRPC status codes.
const (
	codeOK            = 0
	codeInvalid       = 3
	codeNotFound      = 5
	codeUnimplemented = 12
)

// checkPath is the one method served.
const checkPath = "/grpc.health.v1.Health/Check"

// maxMessage bounds a request: a service name is short.
const maxMessage = 64 << 10

// rule is one service's status source.
type rule struct {
	file   string
	invert bool
}

func main() {
	port := flag.Int("port", 9090, "TCP port to serve on")
	flag.Parse()
	rules, err := parseRules(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(1)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler(rules), Protocols: &protocols}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		os.Exit(0)
	}()
	fmt.Printf("grpchealth: serving grpc.health.v1 on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(1)
	}
}

func parseRules(args []string) (map[string]rule, error) {
	rules := map[string]rule{}
	for _, a := range args {
		svc, file, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("argument %q: want SERVICE=FILE or SERVICE=!FILE", a)
		}
		r := rule{file: file}
		if after, found := strings.CutPrefix(file, "!"); found {
			r = rule{file: after, invert: true}
		}
		if r.file == "" {
			return nil, fmt.Errorf("argument %q: no file", a)
		}
		rules[svc] = r
	}
	return rules, nil
}

func (r rule) status() byte {
	_, err := os.Stat(r.file)
	if (err == nil) != r.invert {
		return serving
	}
	return notServing
}

func handler(rules map[string]rule) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.ProtoMajor != 2 || !strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
			http.Error(w, "grpchealth speaks gRPC only", http.StatusUnsupportedMediaType)
			return
		}
		if req.Method != http.MethodPost || req.URL.Path != checkPath {
			trailersOnly(w, codeUnimplemented, "unknown method "+req.URL.Path)
			return
		}
		msg, err := readMessage(req.Body)
		if err != nil {
			trailersOnly(w, codeInvalid, err.Error())
			return
		}
		svc, err := serviceName(msg)
		if err != nil {
			trailersOnly(w, codeInvalid, err.Error())
			return
		}
		r, ok := rules[svc]
		if !ok {
			trailersOnly(w, codeNotFound, "unknown service")
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(http.StatusOK)
		// HealthCheckResponse{status: field 1, varint}, framed
		// uncompressed.
		w.Write([]byte{0, 0, 0, 0, 2, 1<<3 | 0, r.status()})
		w.Header().Set("Grpc-Status", strconv.Itoa(codeOK))
		w.Header().Set("Grpc-Message", "")
	})
}

// trailersOnly answers an RPC with its status alone (gRPC's
// "Trailers-Only" response: one HEADERS frame that ends the stream).
func trailersOnly(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Grpc-Status", strconv.Itoa(code))
	w.Header().Set("Grpc-Message", percentEncode(msg))
	w.WriteHeader(http.StatusOK)
}

// readMessage reads one length-prefixed, uncompressed gRPC message.
func readMessage(body io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(body, hdr[:]); err != nil {
		return nil, fmt.Errorf("read the message header: %w", err)
	}
	if hdr[0] != 0 {
		return nil, errors.New("compressed messages are not accepted")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return nil, fmt.Errorf("message of %d bytes: too long", n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(body, msg); err != nil {
		return nil, fmt.Errorf("read the message: %w", err)
	}
	return msg, nil
}

// serviceName decodes HealthCheckRequest{service: field 1, string},
// skipping fields it does not know, as protobuf decoders do.
func serviceName(msg []byte) (string, error) {
	svc := ""
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return "", errors.New("bad protobuf tag")
		}
		msg = msg[n:]
		switch tag & 7 {
		case 0: // varint
			_, n = binary.Uvarint(msg)
			if n <= 0 {
				return "", errors.New("bad protobuf varint")
			}
			msg = msg[n:]
		case 1: // 64-bit
			if len(msg) < 8 {
				return "", errors.New("short protobuf fixed64")
			}
			msg = msg[8:]
		case 5: // 32-bit
			if len(msg) < 4 {
				return "", errors.New("short protobuf fixed32")
			}
			msg = msg[4:]
		case 2: // length-delimited
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return "", errors.New("bad protobuf length")
			}
			if tag>>3 == 1 {
				svc = string(msg[n : n+int(l)])
			}
			msg = msg[n+int(l):]
		default:
			return "", fmt.Errorf("protobuf wire type %d is not accepted", tag&7)
		}
	}
	return svc, nil
}

// percentEncode is gRPC's encoding of grpc-message: printable ASCII but
// % as is, every other byte %XX.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
