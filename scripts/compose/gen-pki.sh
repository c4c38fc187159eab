#!/bin/sh
# Init step of docker-compose.yml: a CA, the kube-apiserver serving certificate, the service-account
# key pair, an admin client certificate (system:masters) and its kubeconfig, in /pki. Also fetches a
# static kubectl (checksum-verified) into /pki/bin, for the apiserver healthcheck and the CRD step:
# the kube-apiserver image is distroless and has no client of its own.
# Idempotent: an existing /pki/admin.kubeconfig is kept. For local trials only (keys are world-readable
# inside the volume so that the non-root tenantplane containers can read the kubeconfig).
set -eu
KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
cd /pki
if [ -f admin.kubeconfig ] && [ -x bin/kubectl ]; then
  echo "PKI already present"
  exit 0
fi
apk add --no-cache openssl curl >/dev/null

openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=tenantplane-compose-ca" \
  -keyout ca.key -out ca.crt
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
printf 'subjectAltName=DNS:kube-apiserver,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n' > apiserver.ext
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile apiserver.ext -out apiserver.crt
openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=tenantplane-admin" -keyout admin.key -out admin.csr
printf 'extendedKeyUsage=clientAuth\n' > admin.ext
openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile admin.ext -out admin.crt
openssl genrsa -out sa.key 2048
openssl rsa -in sa.key -pubout -out sa.pub

b64() { base64 < "$1" | tr -d '\n'; }
cat > admin.kubeconfig <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: compose
    cluster:
      server: https://kube-apiserver:6443
      certificate-authority-data: $(b64 ca.crt)
users:
  - name: admin
    user:
      client-certificate-data: $(b64 admin.crt)
      client-key-data: $(b64 admin.key)
contexts:
  - name: compose
    context: {cluster: compose, user: admin}
current-context: compose
KUBECONFIG

mkdir -p bin
arch="$(uname -m)"; case "$arch" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
base="https://dl.k8s.io/release/${KUBE_VERSION}/bin/linux/${arch}"
curl -fsSLo bin/kubectl "$base/kubectl"
echo "$(curl -fsSL "$base/kubectl.sha256")  bin/kubectl" | sha256sum -c -
chmod 0755 bin/kubectl
chmod 0644 ./*.crt ./*.key ./*.pub admin.kubeconfig
rm -f ./*.csr ./*.ext ./*.srl
echo "PKI written to /pki"
