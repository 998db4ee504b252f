package main

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// envoySDS is the file the sidecar writes for Envoy: a file-based SDS
// DiscoveryResponse holding one Secret of session_ticket_keys, the keys in
// serving order (Envoy encrypts with the first, decrypts with all). Envoy
// reloads it by itself when the file is renamed into the directory named by
// the path_config_source's watched_directory, which is how the sidecar
// writes it. Untested here: no Envoy build is available.
const envoySDS = "envoy-ticket-keys.json"

// envoy feeds an Envoy through its file-based SDS: no signal, no socket.
type envoy struct {
	dir    string
	secret string // the Secret's name, as session_ticket_keys_sds_secret_config names it
	probe  *prober
}

type sdsResponse struct {
	Resources []sdsSecret `json:"resources"`
}

type sdsSecret struct {
	Type              string        `json:"@type"`
	Name              string        `json:"name"`
	SessionTicketKeys sdsTicketKeys `json:"session_ticket_keys"`
}

type sdsTicketKeys struct {
	Keys []sdsDataSource `json:"keys"`
}

type sdsDataSource struct {
	InlineBytes []byte `json:"inline_bytes"` // base64 in JSON, as Envoy reads bytes
}

func (e *envoy) apply(ctx context.Context, keys []agent.TicketKey) (applied, error) {
	secret := sdsSecret{Type: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", Name: e.secret}
	for _, k := range keys {
		d := derive(k, keyring.FormatEnvoy)
		secret.SessionTicketKeys.Keys = append(secret.SessionTicketKeys.Keys, sdsDataSource{InlineBytes: d[:]})
	}
	var data bytes.Buffer
	data.Grow(1024 + 160*len(keys)) // one buffer, cleared below
	enc := json.NewEncoder(&data)
	enc.SetIndent("", "  ")
	err := enc.Encode(sdsResponse{Resources: []sdsSecret{secret}})
	for _, k := range secret.SessionTicketKeys.Keys {
		clear(k.InlineBytes)
	}
	defer clear(data.Bytes())
	if err != nil {
		return applied{}, fail(causeWrite, "encode %s: %w", envoySDS, err)
	}
	wrote, err := writeFile(e.dir, envoySDS, data.Bytes())
	if err != nil {
		return applied{}, fail(causeWrite, "%w", err)
	}
	if e.probe != nil && wrote && len(keys) > 0 {
		d := derive(keys[0], keyring.FormatEnvoy)
		err := confirm(ctx, e.probe, d[:keyNameSize])
		clear(d[:])
		if err != nil {
			return applied{}, err
		}
	}
	return applied{held: ids(keys), took: wrote}, nil
}
