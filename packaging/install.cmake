# SPDX-License-Identifier: MIT
# Installs (component "daemon") the systemd unit, the D-Bus policy and activation file, the
# polkit action, the sysusers.d and tmpfiles.d entries and the example configuration.
# Destinations are relative to the install prefix, so `cmake --install BUILD --prefix /usr`
# (with DESTDIR= for staging) gives the layout distributions use; each can be overridden.
set(MOLLY_INSTALL_UNITDIR "lib/systemd/system" CACHE STRING "Where mollyd.service goes")
set(MOLLY_INSTALL_SYSUSERSDIR "lib/sysusers.d" CACHE STRING "sysusers.d")
set(MOLLY_INSTALL_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING "tmpfiles.d")
set(MOLLY_INSTALL_DBUS_POLICYDIR "${CMAKE_INSTALL_DATAROOTDIR}/dbus-1/system.d" CACHE STRING
    "D-Bus system bus policy files")
set(MOLLY_INSTALL_DBUS_SERVICEDIR "${CMAKE_INSTALL_DATAROOTDIR}/dbus-1/system-services"
    CACHE STRING "D-Bus system bus activation files")
set(MOLLY_INSTALL_POLKITDIR "${CMAKE_INSTALL_DATAROOTDIR}/polkit-1/actions" CACHE STRING
    "polkit actions")

# The unit names the installed binary, so it is written at install time, when the prefix
# (--prefix) is known.
set(_molly_pkg ${CMAKE_BINARY_DIR}/packaging)
install(CODE "
  set(MOLLYD_PATH \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SBINDIR}/mollyd\")
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/systemd/mollyd.service.in\"
                 \"${_molly_pkg}/mollyd.service\" @ONLY)
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/dbus/org.molly.Daemon1.service.in\"
                 \"${_molly_pkg}/org.molly.Daemon1.service\" @ONLY)
  # /etc for /usr, PREFIX/etc otherwise (as GNUInstallDirs decides at configure time)
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(_etc \"/etc\")
  else()
    set(_etc \"\${CMAKE_INSTALL_PREFIX}/etc\")
  endif()
  file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${_etc}/molly/mollyd.conf.d\")
" COMPONENT daemon)

install(FILES ${_molly_pkg}/mollyd.service DESTINATION ${MOLLY_INSTALL_UNITDIR}
        COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/dbus/org.molly.Daemon1.conf
        DESTINATION ${MOLLY_INSTALL_DBUS_POLICYDIR} COMPONENT daemon)
install(FILES ${_molly_pkg}/org.molly.Daemon1.service
        DESTINATION ${MOLLY_INSTALL_DBUS_SERVICEDIR} COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/polkit/org.molly.policy
        DESTINATION ${MOLLY_INSTALL_POLKITDIR} COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/sysusers.d/molly.conf DESTINATION ${MOLLY_INSTALL_SYSUSERSDIR}
        COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/tmpfiles.d/molly.conf DESTINATION ${MOLLY_INSTALL_TMPFILESDIR}
        COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/mollyd.conf.example DESTINATION ${CMAKE_INSTALL_DOCDIR}
        COMPONENT daemon)

# /dev/molly: the udev rule (group molly for /dev/molly, the molly user's /dev/molly-control)
# and, as component "dkms", kmod-shim's sources laid out for DKMS in /usr/src/molly-shim-VERSION
# (dkms.conf; Kbuild finds the uapi header beside itself).
set(MOLLY_INSTALL_UDEVDIR "lib/udev/rules.d" CACHE STRING "udev rules")
install(FILES ${CMAKE_CURRENT_LIST_DIR}/udev/70-molly.rules DESTINATION ${MOLLY_INSTALL_UDEVDIR}
        COMPONENT daemon)
set(_molly_dkms src/molly-shim-${PROJECT_VERSION})
install(FILES ${CMAKE_SOURCE_DIR}/kmod-shim/Kbuild ${CMAKE_SOURCE_DIR}/kmod-shim/Makefile
              ${CMAKE_SOURCE_DIR}/kmod-shim/molly_shim.c ${CMAKE_SOURCE_DIR}/kmod-shim/dkms.conf
        DESTINATION ${_molly_dkms} COMPONENT dkms)
install(FILES ${CMAKE_SOURCE_DIR}/include/uapi/linux/molly.h
        DESTINATION ${_molly_dkms}/include/uapi/linux COMPONENT dkms)

# The default configuration as /etc/molly/mollyd.conf (packages: a conffile). Off for a plain
# `cmake --install`, which must not overwrite an administrator's file.
option(MOLLY_INSTALL_DEFAULT_CONFIG "Install mollyd.conf.example as SYSCONFDIR/molly/mollyd.conf" OFF)
if(MOLLY_INSTALL_DEFAULT_CONFIG)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/mollyd.conf.example
          DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/molly RENAME mollyd.conf COMPONENT daemon)
endif()

# Shell completion for molly (component "daemon", as molly itself).
set(MOLLY_INSTALL_BASHCOMPDIR "${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions"
    CACHE STRING "bash completions")
set(MOLLY_INSTALL_ZSHCOMPDIR "${CMAKE_INSTALL_DATAROOTDIR}/zsh/site-functions" CACHE STRING
    "zsh completions (Debian: share/zsh/vendor-completions)")
install(FILES ${CMAKE_CURRENT_LIST_DIR}/completion/molly.bash DESTINATION ${MOLLY_INSTALL_BASHCOMPDIR}
        RENAME molly COMPONENT daemon)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/completion/_molly DESTINATION ${MOLLY_INSTALL_ZSHCOMPDIR}
        COMPONENT daemon)
