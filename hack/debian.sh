#!/usr/bin/env bash
# debian.sh PACKAGE...: installs the Debian packages the tests run for real
# (nginx, haproxy for the sidecar's interop suite; prometheus, whose
# promtool and server check the chart's alert rules; knot, the authoritative
# DNS server ECH publishing is tested against), each only when its
# command is missing, so that a run on a machine that has them costs a
# few milliseconds. Needs root, or sudo without a password, when something
# is missing. Prints nothing on stdout.
#
# The packages' own services are not started: Debian's policy-rc.d hook
# (exit 101) keeps postinst from starting nginx or haproxy on the host;
# the tests start their own instances on loopback and stop them by pid.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The command each package provides, to tell whether it is installed.
command_of() {
	case $1 in
	nginx) echo /usr/sbin/nginx ;;
	haproxy) echo /usr/sbin/haproxy ;;
	prometheus) echo /usr/bin/promtool ;;
	openssl) echo /usr/bin/openssl ;;
	knot) echo /usr/sbin/knotd ;;
	knot-dnsutils) echo /usr/bin/kdig ;;
	ipset) echo /usr/sbin/ipset ;;
	*) echo "" ;;
	esac
}

missing=()
for pkg in "$@"; do
	cmd=$(command_of "$pkg")
	if [[ -z "$cmd" ]]; then
		echo "debian.sh: no command known for package $pkg" >&2
		exit 2
	fi
	[[ -x "$cmd" ]] || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	if ! sudo -n true 2>/dev/null; then
		echo "debian.sh: ${missing[*]} missing; install them (apt-get install ${missing[*]}) or run as root" >&2
		exit 1
	fi
	sudo=(sudo -n)
fi

install_packages() {
	# Checked again under the lock: a concurrent run may have installed them.
	local todo=() pkg
	for pkg in "${missing[@]}"; do
		[[ -x "$(command_of "$pkg")" ]] || todo+=("$pkg")
	done
	[[ ${#todo[@]} -eq 0 ]] && return
	log "Installing Debian packages: ${todo[*]}"
	local policy=/usr/sbin/policy-rc.d created=0 status=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 755 "$policy"
		created=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${todo[@]}"; } >&2 || status=$?
	if [[ $created -eq 1 ]]; then
		"${sudo[@]}" rm -f "$policy"
	fi
	return "$status"
}

with_lock debian install_packages
