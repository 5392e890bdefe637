# Sourced by the scripts: puts pip-installed cuobjdump/nvdisasm on PATH when present.
_attnjit_pybin="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/nvidia/cu13/bin"
if [ -x "$_attnjit_pybin/cuobjdump" ]; then
  case ":$PATH:" in *":$_attnjit_pybin:"*) ;; *) export PATH="$PATH:$_attnjit_pybin" ;; esac
fi
unset _attnjit_pybin
