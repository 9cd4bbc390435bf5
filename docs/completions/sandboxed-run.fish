function __sandboxed-run_should_offer_completions_for_flags_or_options -a expected_commands
    set -l non_repeating_flags_or_options $argv[2..]
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __sandboxed-run_parse_tokens
    test "$commands" = "$expected_commands"; and return $non_repeating_flags_or_options_absent
end

function __sandboxed-run_should_offer_completions_for_positional -a expected_commands positional_index_comparison expected_positional_index
    set -l non_repeating_flags_or_options
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __sandboxed-run_parse_tokens
    test "$commands" = "$expected_commands" -a \( "$positional_index" "$positional_index_comparison" "$expected_positional_index" \)
end

function __sandboxed-run_parse_tokens -S
    set -l unparsed_tokens (__sandboxed-run_tokens -pc)
    switch $unparsed_tokens[1]
    case 'sandboxed-run'
        __sandboxed-run_parse_subcommand 0 'version' 'h/help'
        switch $unparsed_tokens[1]
        case 'run'
            __sandboxed-run_parse_subcommand -r 1 'app=' 'policy=' 'best-effort' 'report' 'keep-fd=+' 'setenv=+' 'keep-env=+' 'grant=+' 'on-stale=' 'on-missing=' 'chdir=' 'explain' 'denials=' 'denials-limit=' 'supervise-metadata' 'view=' 'review' 'picker=' 'allow-host=+' 'resolve=+' 'version' 'h/help'
        case 'pick'
            __sandboxed-run_parse_subcommand 0 'app=' 'read-only' 'o/output=' 'select=' 'version' 'h/help'
        case 'resolve'
            __sandboxed-run_parse_subcommand 1 'app=' 'json' 'follow' 'version' 'h/help'
        case 'grants'
            __sandboxed-run_parse_subcommand 0 'version' 'h/help'
            switch $unparsed_tokens[1]
            case 'list'
                __sandboxed-run_parse_subcommand 0 'app=' 'json' 'version' 'h/help'
            case 'revoke'
                __sandboxed-run_parse_subcommand 0 'grant=' 'app=' 'folder=' 'end-holders' 'keep-holders' 'version' 'h/help'
            case 'holders'
                __sandboxed-run_parse_subcommand 0 'app=' 'version' 'h/help'
            case 'rotate-key'
                __sandboxed-run_parse_subcommand 0 'retire-old' 'version' 'h/help'
            end
        case 'container'
            __sandboxed-run_parse_subcommand 0 'version' 'h/help'
            switch $unparsed_tokens[1]
            case 'path'
                __sandboxed-run_parse_subcommand 0 'app=' 'version' 'h/help'
            case 'reinstall'
                __sandboxed-run_parse_subcommand 0 'app=' 'version' 'h/help'
            end
        case 'doctor'
            __sandboxed-run_parse_subcommand 0 'policy=' 'json' 'version' 'h/help'
        case 'append'
            __sandboxed-run_parse_subcommand 2 'timeout=' 'download=' 'version' 'h/help'
        case 'open-panel'
            __sandboxed-run_parse_subcommand 0 'read-only' 'prompt=' 'o/output=' 'version' 'h/help'
        case 'start-accessing'
            __sandboxed-run_parse_subcommand 1 'version' 'h/help'
        case 'stop-accessing'
            __sandboxed-run_parse_subcommand 1 'version' 'h/help'
        case 'coordinate'
            __sandboxed-run_parse_subcommand -r 1 'read=' 'write=' 'intent=' 'timeout=' 'version' 'h/help'
        case 'sync-simulator'
            __sandboxed-run_parse_subcommand 1 'seconds=' 'seed=' 'edit-rate=' 'evict-rate=' 'conflict-rate=' 'naive' 'leave-placeholders' 'version' 'h/help'
        case 'versions'
            __sandboxed-run_parse_subcommand 3 'keep=' 'version' 'h/help'
        case 'review'
            __sandboxed-run_parse_subcommand 0 'version' 'h/help'
            switch $unparsed_tokens[1]
            case 'list'
                __sandboxed-run_parse_subcommand 0 'app=' 'json' 'version' 'h/help'
            case 'diff'
                __sandboxed-run_parse_subcommand -r 1 'app=' 'version' 'h/help'
            case 'accept'
                __sandboxed-run_parse_subcommand -r 1 'app=' 'version' 'h/help'
            case 'reject'
                __sandboxed-run_parse_subcommand -r 1 'app=' 'version' 'h/help'
            end
        case 'help'
            __sandboxed-run_parse_subcommand -r 1 'version'
        end
    end
end

function __sandboxed-run_tokens
    if test (string split -m 1 -f 1 -- . "$FISH_VERSION") -gt 3
        commandline --tokens-raw $argv
    else
        commandline -o $argv
    end
end

function __sandboxed-run_parse_subcommand -S -a positional_count
    argparse -s r -- $argv
    set -l option_specs $argv[2..]
    set -l is_repeating_positional $_flag_r
    set -el _flag_r
    set -a commands $unparsed_tokens[1]
    set positional_index 0
    while true
        set -e unparsed_tokens[1]
        argparse -sn "$commands" $option_specs -- $unparsed_tokens 2> /dev/null
        set unparsed_tokens $argv
        set positional_index (math $positional_index + 1)
        for non_repeating_flag_or_option in $non_repeating_flags_or_options
            if set -ql "_flag_$(string replace -a - _ -- $non_repeating_flag_or_option)"
                set non_repeating_flags_or_options_absent 1
                break
            end
        end
        test (count $unparsed_tokens) -eq 0 -o \( -z "$is_repeating_positional" -a "$positional_index" -gt "$positional_count" \) && break
    end
end

function __sandboxed-run_complete_directories
    set -l token (commandline -t)
    string match -- '*/' $token
    set -l subdirs $token*/
    printf %s\n $subdirs
end

function __sandboxed-run_custom_completion
    set -x SAP_SHELL fish
    set -x SAP_SHELL_VERSION $FISH_VERSION
    set -l tokens (__sandboxed-run_tokens -p)
    if test -z "$(__sandboxed-run_tokens -t)"
        set -l index (count (__sandboxed-run_tokens -pc))
        set tokens $tokens[..$index] \'\' $tokens[(math $index + 1)..]
    end
    command $tokens[1] $argv $tokens
end

complete -c 'sandboxed-run' -f
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'run' -d 'Run a command confined to its container and the folders granted to it.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'pick' -d 'Let the user choose a folder for an app; write the app\'s bookmark.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'resolve' -d 'Resolve a bookmark: fresh, moved, replaced, missing, revoked, wrong-app, invalid, covered or inaccessible.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'grants' -d 'List and revoke grants; list the running sandboxes that hold them; rotate the broker\'s key.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'container' -d 'Show or renew an app\'s container.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'doctor' -d 'Report what this kernel and this user can enforce, and what each policy would get.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'append' -d 'Append TEXT to FILE as one whole line, coordinated with every other writer (merging intent).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'open-panel' -d 'Inside a sandbox: ask the person for a folder, and print the path at which the command now reaches it.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'start-accessing' -d 'Inside a sandbox: make the folder of a bookmark of this app\'s reachable now, and print where.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'stop-accessing' -d 'Inside a sandbox: end one start-accessing of a bookmark; at the last, its folder is unreachable again.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'coordinate' -d 'Run a command while holding FILE\'s coordination, as NSFileCoordinator would.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'sync-simulator' -d 'Act as a sync daemon on FOLDER: uploads, remote edits, evictions to placeholders, conflicts.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'versions' -d 'List, show and resolve a file\'s conflict versions (as NSFileVersion).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'review' -d 'List, diff, accept or reject the changes a command made in a staged grant (run --review).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run" -eq 1' -fa 'help' -d 'Show subcommand help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" policy' -l 'policy' -d 'A built-in policy (writer, read-only, networked, developer) or a policy file (.plist, .entitlements or .json). Default: writer.' -rfka '(__sandboxed-run_custom_completion ---completion run -- --policy (count (__sandboxed-run_tokens -pc)) (__sandboxed-run_tokens -tC))'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" best-effort' -l 'best-effort' -d 'Run even when the kernel cannot enforce everything the policy needs, and say what was not enforced.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" report' -l 'report' -d 'Print what is enforced to stderr before starting the command.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'keep-fd' -d 'Keep this open descriptor (beyond 0, 1, 2) in the command. Repeatable.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'setenv' -d 'Set NAME=VALUE in the command\'s environment. Repeatable.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'keep-env' -d 'Pass this variable from your environment to the command. Repeatable.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'grant' -d 'NAME=FILE: resolve the bookmark FILE and give the command its folder, as $SANDBOX_GRANT_NAME. Repeatable.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" on-stale' -l 'on-stale' -d 'When a granted folder moved: fail, prompt (pick again), or follow (accept the move and rewrite the bookmark). Default: prompt on a terminal, else fail.' -rfka 'fail prompt follow'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" on-missing' -l 'on-missing' -d 'When a grant\'s bookmark file does not exist: fail, or prompt (pick the folder now and write it).' -rfka 'fail prompt'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" chdir' -l 'chdir' -d 'The command\'s working directory, a folder the sandbox can reach (default: its container). A relative command is found from it.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" explain' -l 'explain' -d 'Explain each operation the sandbox refuses, on stderr, while the command runs: the path or syscall, the layer, and the grant or policy key that would allow it.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" denials' -l 'denials' -d 'Append each refused operation to FILE as JSON lines (outside every grant and the container).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" denials-limit' -l 'denials-limit' -d 'With --denials: the most the log may hold, in bytes, or with K, M or G (KiB, MiB, GiB); beyond, one record says it was cut and the command runs on. Default: 16M.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" supervise-metadata' -l 'supervise-metadata' -d 'Have the supervisor decide every chmod, chown, utimes and xattr write (EPERM outside the writable folders) instead of read-only mounts (EROFS, at native speed). --explain implies it.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" view' -l 'view' -d 'private (default): a root holding only the container, the grants and the policy\'s system paths, and a network namespace of its own without a network entitlement; host: the host\'s tree, read-only where the rules allow, every other path visible to stat.' -rfka 'private host'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" review' -l 'review' -d 'Stage every change the command makes in its read-write grants: it sees a clone of each folder in its place, the folder itself is untouched until you accept (`sandboxed-run review`). On a terminal you are asked at the end. Needs the private view. As the policy key org.sandboxed-run.files.review.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" picker' -l 'picker' -d 'A program that asks the person for a folder while the command runs (`$SANDBOXED_RUN open-panel` inside): run unconfined with the prompt as its argument, it prints the chosen folder\'s absolute path and a newline. Without it, the person is asked on the terminal the launcher relays. Needs the private view and a policy with a user-selected key.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'allow-host' -d 'HOST, HOST:PORT or *.SUFFIX[:PORT] (ports 80 and 443 when none is given), or an address: the command reaches only the hosts named so, through the launcher\'s proxy (HTTP_PROXY and ALL_PROXY are set), from a network namespace of its own; DNS answers only these names. Repeatable; added to the policy key org.sandboxed-run.network.allowed-hosts. Needs the private view.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run"' -l 'resolve' -d 'NAME:ADDRESS, a testing aid as curl\'s --resolve: the proxy takes NAME (an allowed host) to be at ADDRESS instead of asking DNS. Repeatable.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run run" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" read-only' -l 'read-only' -d 'Grant read-only access.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" o output' -l 'output' -s 'o' -d 'Where to write the bookmark (replaced atomically).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" select' -l 'select' -d 'Choose this folder without asking.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run pick" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run resolve" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run resolve" json' -l 'json' -d 'Print JSON.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run resolve" follow' -l 'follow' -d 'If the folder moved, accept it: rewrite the bookmark with its new place.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run resolve" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run resolve" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run grants" -eq 1' -fa 'list' -d 'Show who can reach what.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run grants" -eq 1' -fa 'revoke' -d 'Revoke grants by id, app or folder; say which running sandboxes still hold them, and offer to end those.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run grants" -eq 1' -fa 'holders' -d 'List running sandboxes that hold grants.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run grants" -eq 1' -fa 'rotate-key' -d 'Seal new bookmarks with a new key.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants list" app' -l 'app' -d 'Only this app\'s grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants list" json' -l 'json' -d 'Print JSON.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants list" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants list" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" grant' -l 'grant' -d 'A grant id (or a unique prefix), as `grants list` shows.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" app' -l 'app' -d 'Every grant of this app.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" folder' -l 'folder' -d 'Every grant of this folder, for every app.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" end-holders' -l 'end-holders' -d 'End the running sandboxes that still hold a revoked folder, without asking.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" keep-holders' -l 'keep-holders' -d 'Neither end nor ask about running sandboxes that still hold a revoked folder.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants revoke" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants holders" app' -l 'app' -d 'Only this app\'s sandboxes.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants holders" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants holders" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants rotate-key" retire-old' -l 'retire-old' -d 'Delete every key but the current one.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants rotate-key" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run grants rotate-key" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run container" -eq 1' -fa 'path' -d 'Print the app\'s current container (created if absent).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run container" -eq 1' -fa 'reinstall' -d 'Move the app\'s container to a new install id, as an app update does.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container path" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container path" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container path" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container reinstall" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container reinstall" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run container reinstall" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run doctor" policy' -l 'policy' -d 'Report only this policy (a built-in name or a file).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run doctor" json' -l 'json' -d 'Print one JSON object, for scripts.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run doctor" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run doctor" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run append" timeout' -l 'timeout' -d 'Seconds to wait for other parties (default 30).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run append" download' -l 'download' -d 'When FILE is only a placeholder, ask the sync daemon for it and wait this many seconds (default: refuse at once).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run append" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run append" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run open-panel" read-only' -l 'read-only' -d 'Ask for read-only access.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run open-panel" prompt' -l 'prompt' -d 'Text the picker shows (escaped, and cut to 200 characters).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run open-panel" o output' -l 'output' -s 'o' -d 'Write a bookmark of the folder here (replaced atomically).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run open-panel" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run open-panel" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run start-accessing" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run start-accessing" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run stop-accessing" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run stop-accessing" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" read' -l 'read' -d 'Coordinate reading FILE.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" write' -l 'write' -d 'Coordinate writing FILE.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" intent' -l 'intent' -d 'The writing intent.' -rfka 'merging replacing deleting moving'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" timeout' -l 'timeout' -d 'Seconds to wait for other parties (default 30).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run coordinate" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" seconds' -l 'seconds' -d 'Stop after this many seconds (default: until SIGINT or SIGTERM).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" seed' -l 'seed' -d 'The random seed, a whole number (default 1): the same seed makes the same run.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" edit-rate' -l 'edit-rate' -d 'Remote edits (whole files rewritten) per second (default 1).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" evict-rate' -l 'evict-rate' -d 'Evictions to placeholders, and materialisations, per second (default 0).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" conflict-rate' -l 'conflict-rate' -d 'Concurrent changes that end in a conflict version, per second (default 0).' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" naive' -l 'naive' -d 'Ignore the coordination protocol (to show the failure).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" leave-placeholders' -l 'leave-placeholders' -d 'At the end, leave evicted files as placeholders (default: bring them back).'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run sync-simulator" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run versions" -eq 1' -fka 'list show resolve'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run versions" keep' -l 'keep' -d 'What resolve keeps: current, newest, or a version\'s identifier.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run versions" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run versions" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run review" -eq 1' -fa 'list' -d 'Name every staged change: added, modified, deleted, renamed (with from), mode-changed.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run review" -eq 1' -fa 'diff' -d 'Print a unified diff of the staged changes (git apply and patch -p1 take it); binary files as one line.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run review" -eq 1' -fa 'accept' -d 'Apply staged changes to the folder, as a coordinated writer; exit 0 once they are on disk.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_positional "sandboxed-run review" -eq 1' -fa 'reject' -d 'Throw staged changes away; the folder is not touched.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review list" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review list" json' -l 'json' -d 'Print a JSON array of objects with path, change, and from (renamed), item, grant, changedOutside.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review list" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review list" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review diff" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review diff" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review diff" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review accept" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review accept" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review accept" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review reject" app' -l 'app' -d 'The app\'s identifier, such as com.example.memo: it names the app\'s container and grants.' -rfka ''
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review reject" version' -l 'version' -d 'Show the version.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run review reject" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'sandboxed-run' -n '__sandboxed-run_should_offer_completions_for_flags_or_options "sandboxed-run help" version' -l 'version' -d 'Show the version.'
