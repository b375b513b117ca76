# SPDX-License-Identifier: GPL-2.0
#
# install.mk: installation, included at the end of the top Makefile
# (`include $(SRC)/install.mk`).  It also works on its own:
#   make -f Makefile -f install.mk install
#
#   make install         libkvrt (shared + static, soname links), kvrt.h,
#                        kvrt.pc, the tools that are built (kvctl, kvbench,
#                        kvrt-demo), man pages, the udev rule, the sysusers.d
#                        group, and the examples and docs
#   make install-dkms    the module's sources and dkms.conf to
#                        /usr/src/kvpool-$(KVPOOL_VERSION); with no DESTDIR
#                        and dkms present, also `dkms add` and `dkms install`
#                        for every installed kernel that has its headers
#   make uninstall       removes what `make install` installed
#   make uninstall-dkms  removes the DKMS source tree (after `dkms remove`)
#
# Variables (override on the command line):
#   PREFIX=/usr/local DESTDIR=  BINDIR LIBDIR INCLUDEDIR PKGCONFIGDIR MANDIR
#   DOCDIR UDEVRULESDIR SYSUSERSDIR DKMSSRCDIR KVPOOL_VERSION
#
# Where files go, and why:
#   - udev rule: $(PREFIX)/lib/udev/rules.d when PREFIX is /usr or
#     /usr/local: udev reads both (udev(7)), they belong to the installed
#     software, and /etc/udev/rules.d stays the administrator's (a file of
#     the same name there overrides ours).  Any other PREFIX: udev would
#     never read $(PREFIX)/lib/udev/rules.d, so the rule goes to
#     /etc/udev/rules.d.
#   - sysusers.d: systemd-sysusers reads /usr/lib/sysusers.d and
#     /etc/sysusers.d but no /usr/local path: /usr/lib/sysusers.d for
#     PREFIX=/usr, /etc/sysusers.d otherwise.
#   - modprobe.d and modules-load.d files are examples, not live
#     configuration: they go to $(DOCDIR) (with the docs), and loading
#     options stay the administrator's choice.
#   - every tool goes to $(BINDIR), kvctl too: its read commands (status,
#     top, size) are for every user, and Debian puts no sbin on users' PATH.
#   - DKMS wants its sources in /usr/src/NAME-VERSION whatever PREFIX is.
#
# With no DESTDIR, as root, install also runs ldconfig, creates the kvpool
# group (systemd-sysusers, else groupadd) and reloads udev's rules.

# This file's directory: the source tree.  Taken before anything else is
# included.
KVP_TOP := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))

# An included file must not change the including Makefile's default goal.
KVP_SAVED_GOAL := $(.DEFAULT_GOAL)

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/kvpool
ifneq ($(filter /usr /usr/local,$(PREFIX)),)
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
else
UDEVRULESDIR ?= /etc/udev/rules.d
endif
ifeq ($(PREFIX),/usr)
SYSUSERSDIR ?= /usr/lib/sysusers.d
else
SYSUSERSDIR ?= /etc/sysusers.d
endif
DKMSSRCDIR ?= /usr/src

INSTALL ?= install

# The library's version, as libkvrt/Makefile takes it from kvrt.h; the
# project (and so the DKMS package) carries the same version.
KVP_KVRT_H := $(KVP_TOP)/libkvrt/include/kvrt.h
KVP_LIBVER := $(shell sed -n 's/^\#define KVRT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' \
	$(KVP_KVRT_H) | paste -sd.)
KVP_SOMAJOR := $(firstword $(subst ., ,$(KVP_LIBVER)))
KVPOOL_VERSION ?= $(KVP_LIBVER)

KVP_LIBB := $(KVP_TOP)/libkvrt/build
# kvrt.pc says ${prefix}/lib where LIBDIR is under PREFIX, so it relocates.
KVP_PC_LIBDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
KVP_PC_INCLUDEDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))
KVP_TOOLS := tools/kvctl/kvctl tools/kvbench/kvbench tools/kvrt-demo/kvrt-demo
KVP_MANPAGES := $(sort $(wildcard $(KVP_TOP)/Documentation/man/*.[0-9]))
KVP_DOCS := $(sort $(wildcard $(KVP_TOP)/Documentation/*.rst))
KVP_ABI := $(wildcard $(KVP_TOP)/Documentation/ABI/testing/sysfs-class-misc-kvpool)
KVP_PKG := $(KVP_TOP)/packaging

# The DKMS tree: what Kbuild needs to build kmod/kvpool.ko, nothing built.
KVP_DKMS_DIR = $(DESTDIR)$(DKMSSRCDIR)/kvpool-$(KVPOOL_VERSION)
KVP_DKMS_KMOD := $(KVP_TOP)/kmod/Kbuild $(wildcard $(KVP_TOP)/kmod/Makefile) \
	$(filter-out %.mod.c,$(wildcard $(KVP_TOP)/kmod/*.c)) $(wildcard $(KVP_TOP)/kmod/*.h)
KVP_DKMS_CORE := $(wildcard $(KVP_TOP)/kmod/core/*.c $(KVP_TOP)/kmod/core/*.h)
KVP_DKMS_KUNIT := $(wildcard $(KVP_TOP)/kmod/kunit/*.c $(KVP_TOP)/kmod/kunit/*.h)

.PHONY: install install-dkms uninstall uninstall-dkms kvp-install-lib kvp-install-tools \
	kvp-install-man kvp-install-data kvp-build-lib

# After everything is in place: only on the live system (no DESTDIR) and
# as root; each step is best effort.
install: kvp-install-lib kvp-install-tools kvp-install-man kvp-install-data
ifeq ($(DESTDIR),)
	@if [ "$$(id -u)" -ne 0 ]; then \
		echo "install: not root: run ldconfig, create the kvpool group and reload udev by hand"; \
		exit 0; \
	fi; \
	ldconfig || true; \
	if command -v systemd-sysusers >/dev/null 2>&1; then \
		systemd-sysusers $(SYSUSERSDIR)/kvpool.conf || true; \
	elif ! getent group kvpool >/dev/null; then \
		groupadd --system kvpool || true; \
	fi; \
	if command -v udevadm >/dev/null 2>&1 && [ -S /run/udev/control ]; then \
		udevadm control --reload || true; \
		[ ! -e /dev/kvpool ] || udevadm trigger --subsystem-match=misc --sysname-match=kvpool || true; \
	fi; \
	echo "install: done; add users to the kvpool group to give them /dev/kvpool (usermod -aG kvpool USER)"
endif

# libkvrt's own Makefile decides what is out of date.
kvp-build-lib:
	$(MAKE) -C $(KVP_TOP)/libkvrt build/libkvrt.so.$(KVP_LIBVER) build/libkvrt.a

kvp-install-lib: kvp-build-lib
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 0755 $(KVP_LIBB)/libkvrt.so.$(KVP_LIBVER) $(DESTDIR)$(LIBDIR)/
	ln -sfn libkvrt.so.$(KVP_LIBVER) $(DESTDIR)$(LIBDIR)/libkvrt.so.$(KVP_SOMAJOR)
	ln -sfn libkvrt.so.$(KVP_SOMAJOR) $(DESTDIR)$(LIBDIR)/libkvrt.so
	$(INSTALL) -m 0644 $(KVP_LIBB)/libkvrt.a $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 0644 $(KVP_KVRT_H) $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(KVP_LIBVER)|' \
		-e 's|^libdir=.*|libdir=$(KVP_PC_LIBDIR)|' \
		-e 's|^includedir=.*|includedir=$(KVP_PC_INCLUDEDIR)|' \
		$(KVP_TOP)/libkvrt/kvrt.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/kvrt.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/kvrt.pc

# Each tool only if it was built (`make tools`).
kvp-install-tools:
	$(INSTALL) -d $(DESTDIR)$(BINDIR)
	@for t in $(KVP_TOOLS); do \
		if [ -x $(KVP_TOP)/$$t ]; then \
			echo "$(INSTALL) -m 0755 $$t $(DESTDIR)$(BINDIR)/"; \
			$(INSTALL) -m 0755 $(KVP_TOP)/$$t $(DESTDIR)$(BINDIR)/ || exit 1; \
		else \
			echo "install: $${t##*/} not built ($$t): skipped"; \
		fi; \
	done

# Documentation/man/NAME.N goes to $(MANDIR)/manN/.
kvp-install-man:
	@for m in $(KVP_MANPAGES); do \
		s=$${m##*.}; \
		echo "$(INSTALL) -m 0644 $${m#$(KVP_TOP)/} $(DESTDIR)$(MANDIR)/man$$s/"; \
		$(INSTALL) -d $(DESTDIR)$(MANDIR)/man$$s && \
		$(INSTALL) -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/ || exit 1; \
	done

kvp-install-data:
	$(INSTALL) -d $(DESTDIR)$(UDEVRULESDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(DOCDIR)
	$(INSTALL) -m 0644 $(KVP_PKG)/udev/60-kvpool.rules $(DESTDIR)$(UDEVRULESDIR)/
	$(INSTALL) -m 0644 $(KVP_PKG)/sysusers.d/kvpool.conf $(DESTDIR)$(SYSUSERSDIR)/kvpool.conf
	$(INSTALL) -m 0644 $(KVP_PKG)/modprobe.d/kvpool.conf $(DESTDIR)$(DOCDIR)/modprobe.d-kvpool.conf
	$(INSTALL) -m 0644 $(KVP_PKG)/modules-load.d/kvpool.conf \
		$(DESTDIR)$(DOCDIR)/modules-load.d-kvpool.conf
	$(INSTALL) -m 0644 $(KVP_DOCS) $(KVP_ABI) $(DESTDIR)$(DOCDIR)/

install-dkms:
	rm -rf $(KVP_DKMS_DIR)
	$(INSTALL) -d $(KVP_DKMS_DIR)/kmod/core $(KVP_DKMS_DIR)/include/uapi/linux
	$(INSTALL) -m 0644 $(KVP_TOP)/Kbuild $(KVP_DKMS_DIR)/
	$(INSTALL) -m 0644 $(KVP_DKMS_KMOD) $(KVP_DKMS_DIR)/kmod/
	$(INSTALL) -m 0644 $(KVP_DKMS_CORE) $(KVP_DKMS_DIR)/kmod/core/
	$(if $(KVP_DKMS_KUNIT),$(INSTALL) -d $(KVP_DKMS_DIR)/kmod/kunit && \
		$(INSTALL) -m 0644 $(KVP_DKMS_KUNIT) $(KVP_DKMS_DIR)/kmod/kunit/)
	$(INSTALL) -m 0644 $(KVP_TOP)/include/uapi/linux/kvpool.h $(KVP_DKMS_DIR)/include/uapi/linux/
	sed -e 's|@VERSION@|$(KVPOOL_VERSION)|' $(KVP_PKG)/dkms.conf > $(KVP_DKMS_DIR)/dkms.conf
	chmod 0644 $(KVP_DKMS_DIR)/dkms.conf
ifeq ($(DESTDIR),)
	@if command -v dkms >/dev/null 2>&1 && [ "$$(id -u)" -eq 0 ]; then \
		if dkms status -m kvpool -v $(KVPOOL_VERSION) 2>/dev/null | grep -q '^kvpool/'; then \
			echo "install-dkms: kvpool/$(KVPOOL_VERSION) is already added to DKMS"; \
		else \
			dkms add -m kvpool -v $(KVPOOL_VERSION) || exit 1; \
		fi; \
		for k in $$(ls /lib/modules); do \
			[ -d /lib/modules/$$k/build ] || continue; \
			echo "install-dkms: building and installing for $$k"; \
			dkms install -m kvpool -v $(KVPOOL_VERSION) -k $$k || \
				echo "install-dkms: FAILED for $$k (its log: /var/lib/dkms/kvpool/$(KVPOOL_VERSION)/build/make.log)"; \
		done; \
		echo "install-dkms: kernels installed later get it automatically (AUTOINSTALL)"; \
	else \
		echo "install-dkms: as root, with dkms installed (apt-get install dkms), run:"; \
		echo "  dkms add -m kvpool -v $(KVPOOL_VERSION) && dkms install -m kvpool -v $(KVPOOL_VERSION)"; \
	fi
endif

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libkvrt.so.$(KVP_LIBVER) \
		$(DESTDIR)$(LIBDIR)/libkvrt.so.$(KVP_SOMAJOR) $(DESTDIR)$(LIBDIR)/libkvrt.so \
		$(DESTDIR)$(LIBDIR)/libkvrt.a $(DESTDIR)$(INCLUDEDIR)/kvrt.h \
		$(DESTDIR)$(PKGCONFIGDIR)/kvrt.pc \
		$(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(KVP_TOOLS))) \
		$(foreach m,$(KVP_MANPAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(DESTDIR)$(UDEVRULESDIR)/60-kvpool.rules $(DESTDIR)$(SYSUSERSDIR)/kvpool.conf
	rm -rf $(DESTDIR)$(DOCDIR)

uninstall-dkms:
	rm -rf $(KVP_DKMS_DIR)

ifneq ($(KVP_SAVED_GOAL),)
.DEFAULT_GOAL := $(KVP_SAVED_GOAL)
else
# Included before any rule: let the including Makefile's next rule be the default.
.DEFAULT_GOAL :=
endif
