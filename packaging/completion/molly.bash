# SPDX-License-Identifier: MIT
# bash completion for molly(1): commands, their sub-commands and options; adapter names from
# the running daemon's `molly adapters list`, given a second at most (a completion must not
# hang on a bus that does not answer).
_molly_adapter_names()
{
	timeout 1 molly adapters list 2>/dev/null | awk 'NR > 1 && $1 != "" { print $1 }'
}

_molly()
{
	local cur prev words cword
	_init_completion || return

	local global_opts="--json --bus-address --session --help --version"
	local commands="ask adapters status config key explain audit priors"
	local i cmd= sub= cmd_index=0
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--bus-address) ((i++)) ;;
		-*) ;;
		*)
			if [[ -z $cmd ]]; then
				cmd=${words[i]} cmd_index=$i
			elif [[ -z $sub ]]; then
				sub=${words[i]}
			fi
			;;
		esac
	done

	case $prev in
	--bus-address | --url | --stop | --seed | --max-tokens | --temperature | --name | \
		--since | --domain | --target | --score)
		return ;;
	--unix-socket | --state-dir | --config | --out)
		_filedir
		return ;;
	--transport)
		COMPREPLY=($(compgen -W "dev dbus http auto" -- "$cur"))
		return ;;
	--adapter)
		COMPREPLY=($(compgen -W "$(_molly_adapter_names)" -- "$cur"))
		return ;;
	--tier)
		COMPREPLY=($(compgen -W "T0 T1 T2 T3" -- "$cur"))
		return ;;
	--class)
		COMPREPLY=($(compgen -W "public personal secret" -- "$cur"))
		return ;;
	esac

	if [[ -z $cmd ]]; then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$global_opts" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return
	fi

	case $cmd in
	ask)
		COMPREPLY=($(compgen -W "--adapter --chat --max-tokens --temperature --transport
			--url --unix-socket --seed --stop" -- "$cur")) ;;
	adapters)
		if [[ -z $sub ]]; then
			COMPREPLY=($(compgen -W "list import load unload pin unpin remove prefetch
				history rollback gc fsck" -- "$cur"))
		else
			case $sub in
			import)
				if [[ $cur == -* ]]; then
					COMPREPLY=($(compgen -W "--name --load" -- "$cur"))
				else
					_filedir
				fi ;;
			load | unload | pin | unpin | remove | prefetch | history | rollback)
				COMPREPLY=($(compgen -W "$(_molly_adapter_names)" -- "$cur")) ;;
			fsck)
				COMPREPLY=($(compgen -W "--state-dir --config --repair" -- "$cur")) ;;
			esac
		fi ;;
	config)
		if [[ -z $sub ]]; then
			COMPREPLY=($(compgen -W "check apply" -- "$cur"))
		elif [[ $sub == apply ]]; then
			COMPREPLY=($(compgen -W "--config --out" -- "$cur"))
		else
			_filedir conf
		fi ;;
	key)
		[[ -z $sub ]] && COMPREPLY=($(compgen -W "new" -- "$cur")) ;;
	explain)
		COMPREPLY=($(compgen -W "--config --daemon --json --" -- "$cur")) ;;
	audit)
		COMPREPLY=($(compgen -W "--since --tier --class --state-dir" -- "$cur")) ;;
	priors)
		if [[ -z $sub ]]; then
			COMPREPLY=($(compgen -W "record list" -- "$cur"))
		elif [[ $sub == record ]]; then
			COMPREPLY=($(compgen -W "--domain --target --score" -- "$cur"))
		fi ;;
	esac
} &&
	complete -F _molly molly
