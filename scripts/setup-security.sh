#!/usr/bin/env bash
# Idempotent set-up for the `tls` and `sasl` features (zookeeper-mt-sys / zookeeper-mt) and
# their tests. Installs only the Debian packages that are missing:
#
#   libssl-dev        OpenSSL headers + libssl/libcrypto, for `tls` (HAVE_OPENSSL_H)
#   libsasl2-dev      Cyrus SASL headers + libsasl2, for `sasl` (HAVE_CYRUS_SASL_H)
#   libsasl2-modules  the Cyrus SASL mechanism plugins, DIGEST-MD5 among them (a client
#                     built with `sasl` fails at run time without them: "no mechanism")
#   openssl           the CLI the tests use to make a CA and certificates
#   pkg-config        how the build finds OpenSSL and Cyrus SASL
#   default-jre-headless  `keytool`, for the server's keystore and truststore
#
# Runs apt-get as root, or through sudo. Set ZK_SETUP_SKIP=1 to skip entirely.
set -euo pipefail

if [ "${ZK_SETUP_SKIP:-0}" = "1" ]; then
  echo "setup-security: ZK_SETUP_SKIP=1, skipping package checks"
  exit 0
fi

packages=(libssl-dev libsasl2-dev libsasl2-modules openssl pkg-config default-jre-headless)

exec "$(dirname "$0")"/ensure-packages.sh setup-security "${packages[@]}"
