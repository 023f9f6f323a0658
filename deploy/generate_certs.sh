#!/usr/bin/env bash
# A private CA and a SuperLink certificate signed by it, for docker-compose.tls.yml.
#   bash deploy/generate_certs.sh [OUT_DIR]      (default deploy/certs)
# The certificate is valid for the compose service name "superlink", for localhost and
# 127.0.0.1 (the SuperLink's own ServerApp runtime connects there), and for every
# extra name in SUPERLINK_SANS, e.g. the SuperLink host of real devices:
#   SUPERLINK_SANS="DNS:superlink.lan,IP:192.168.1.10" bash deploy/generate_certs.sh
# Writes ca.crt (give it to every SuperNode and `flwr run`), ca.key (keep it off the
# devices), server.pem and server.key (SuperLink only). Existing files are replaced.
set -euo pipefail
out=${1:-"$(dirname "$0")/certs"}
days=${CERT_DAYS:-365}
sans="DNS:superlink,DNS:localhost,IP:127.0.0.1${SUPERLINK_SANS:+,$SUPERLINK_SANS}"
mkdir -p "$out"
cd "$out"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days "$days" -sha256 \
  -subj "/CN=fedram-flwr CA" 2>/dev/null
openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=superlink" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.pem \
  -days "$days" -sha256 -extfile <(printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\n' "$sans") \
  2>/dev/null
rm -f server.csr ca.srl
chmod 600 ca.key server.key
echo "generate_certs: wrote $(pwd)/{ca.crt,ca.key,server.pem,server.key} for $sans" >&2
