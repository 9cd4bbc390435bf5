import Foundation
import Testing

/// Issue 30, item 1: the confined command fills the disk it shares with the
/// ledger (containers and state are both under the user's XDG folders), and
/// revocation must still complete: `grants revoke` said "the grant ledger
/// failed: database or disk is full", exited 125 and revoked nothing, while
/// the command went on reading the folder. Each row builds a 40 MB tmpfs in
/// a mount namespace of its own (`unshare -m`), puts home, state and
/// containers on it (the records of running sandboxes too), lets the command
/// attach or get a folder and then write `Documents/fill` until ENOSPC, and
/// revokes: as root, and as uid 65534 (the tmpfs chowned to it), who has no
/// reserved blocks anywhere. On e593dde every row fails.
@Suite(.serialized) struct FullDiskRevocationTests {
    static let canMount = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    struct Row: Sendable, CustomTestStringConvertible {
        /// root or nobody.
        let user: String
        /// live (start-accessing, private view), launch (`run --grant`,
        /// private view), host (`run --grant --view host`), two (two live
        /// grants, one revoked), full (the reserve full), missing (no reserve).
        let mode: String
        /// The full disk: tmpfs, or a loop-mounted ext4 or btrfs image (300 MB).
        var filesystem = "tmpfs"
        var testDescription: String { "\(user) \(mode) on \(filesystem)" }
    }

    static let rows: [Row] = [
        Row(user: "root", mode: "live"), Row(user: "nobody", mode: "live"),
        Row(user: "root", mode: "launch"), Row(user: "nobody", mode: "launch"),
        Row(user: "root", mode: "host"), Row(user: "nobody", mode: "host"),
        Row(user: "nobody", mode: "two"), Row(user: "root", mode: "two"),
    ]
    /// ext4 overwrites in place; btrfs copies on write unless a file is NOCOW.
    static let loopRows: [Row] = [
        Row(user: "nobody", mode: "live", filesystem: "ext4"), Row(user: "root", mode: "host", filesystem: "ext4"),
        Row(user: "nobody", mode: "live", filesystem: "btrfs"), Row(user: "root", mode: "host", filesystem: "btrfs"),
    ]
    static let canLoop = canMount && FileManager.default.fileExists(atPath: "/dev/loop-control")
        && FileManager.default.isExecutableFile(atPath: "/usr/sbin/mkfs.ext4") && FileManager.default.isExecutableFile(atPath: "/usr/sbin/mkfs.btrfs")
        && ((try? String(contentsOfFile: "/proc/filesystems", encoding: .utf8))?.contains("\tbtrfs\n") ?? false)

    /// The row's scratch folder on the ordinary disk (results are written
    /// there, never on the full one) and what the script left in it.
    struct Outcome {
        let scratch: String
        let log: String
        func file(_ name: String) -> String { (try? String(contentsOfFile: scratch + "/" + name, encoding: .utf8)) ?? "" }
        func code(_ name: String) -> Int? { Int(file(name).trimmingCharacters(in: .whitespacesAndNewlines)) }
        var describe: String { "\(log)\nrevoke: \(file("revoke.out"))\(file("revoke.err"))\ncommand: \(file("command.out"))\(file("command.err"))" }
    }

    /// Runs the script for `row`; `extra` runs after the disk is full and
    /// before the revoke (`$as` runs as the row's user).
    func play(_ row: Row) throws -> Outcome {
        let scratch = "/var/tmp/sandboxed-run-fulldisk-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        try Self.script.write(toFile: scratch + "/row.sh", atomically: true, encoding: .utf8)
        let result = try CLI.program("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/bash", scratch + "/row.sh",
                                                          scratch, CLI.binary, row.user, row.mode, row.filesystem])
        return Outcome(scratch: scratch, log: result.stdout + result.stderr)
    }

    func clean(_ outcome: Outcome) { try? FileManager.default.removeItem(atPath: outcome.scratch) }

    @Test(.enabled(if: canMount, "needs root, unshare and setpriv: a tmpfs in a private mount namespace, and uid 65534"), arguments: rows)
    func revocationCompletesOnAFullDisk(_ row: Row) throws { try check(row) }

    @Test(.enabled(if: canLoop, "needs root, loop devices, mkfs.ext4, mkfs.btrfs and btrfs in the kernel"), arguments: loopRows)
    func revocationCompletesOnAFullLoopDisk(_ row: Row) throws { try check(row) }

    func check(_ row: Row) throws {
        let outcome = try play(row)
        defer { clean(outcome) }
        try #require(outcome.code("setup.code") == 0, "the row's setup failed: \(outcome.describe)")
        // Full to what df can tell (ext4 says 1024 bytes to a user whose writes fail), and the ledger write fails below.
        #expect((outcome.code("free") ?? .max) < 4096, "the disk was not full: \(outcome.file("free"))")
        #expect(outcome.file("command.out").contains("filled"), "\(outcome.describe)")
        // The revocation completes, says what happened and what to do, and exits 0 (it is on disk).
        #expect(outcome.code("revoke.code") == 0, "\(outcome.describe)")
        let out = outcome.file("revoke.out"), err = outcome.file("revoke.err")
        // By app (both of its grants: the vault and another folder), or by folder.
        let revoked = row.mode == "two" ? 1 : 2
        #expect(out.hasPrefix("revoked \(revoked) grant\(revoked == 1 ? "" : "s")\n"), "\(outcome.describe)")
        // On btrfs the state folder is NOCOW (RevocationReserve.writeInPlace): the ledger's pages may be
        // overwritten in place, so the ledger itself may take the revocation on the full disk (when
        // SQLite needs no new page); then nothing is held in the reserve, and nothing says it is.
        // Elsewhere a page or two may come free after the command filled the disk (its own
        // process exiting), and the ledger may then take it too: correct, and said the same way
        // (nothing on stderr; the ledger's own count is checked below). Seen in a helper's run on tmpfs.
        let inPlace = err.isEmpty
        if !inPlace {
            #expect(err.contains("the ledger could not be written (the grant ledger failed: database or disk is full)"), "\(outcome.describe)")
            #expect(err.contains("The revocation is held instead in \(outcome.scratch)/disk/state/sandboxed-run/revocations"), "\(outcome.describe)")
            #expect(err.contains("free space on the filesystem of"), "\(outcome.describe)")
        }
        switch row.mode {
        case "host":
            // A launch-time grant in the host view cannot be taken away: its holder is ended.
            #expect(out.contains("still held by 1 running sandbox") && out.contains("ended pid"), "\(outcome.describe)")
            #expect(outcome.file("sandbox.code").trimmingCharacters(in: .whitespacesAndNewlines) == "143", "\(outcome.describe)")
        default:
            #expect(out.contains("cut in 1 running sandbox (private view)"), "\(outcome.describe)")
            #expect(!out.contains("not yet cut") && !out.contains("still held"), "\(outcome.describe)")
            #expect(outcome.file("command.out").contains("cut\n"), "the command still reads the folder: \(outcome.describe)")
        }
        if row.mode == "two" {
            // The record was rewritten on the full disk: only the grant still held is named.
            let holders = outcome.file("holders.out")
            #expect(holders.contains("/disk/home/other  (grant") && !holders.contains("/disk/home/vault  (grant"), "\(holders)")
        }
        // From then on it resolves as revoked, everywhere, while the disk is still full.
        #expect(outcome.code("resolve.code") == 13, "\(outcome.file("resolve.out"))")
        #expect(outcome.file("list.out").contains("\"state\":\"revoked\""), "\(outcome.file("list.out"))")
        #expect(inPlace ? outcome.file("list.err").isEmpty : outcome.file("list.err").contains("1 revocation is held in the revocation reserve"),
                "\(outcome.file("list.err"))")
        // Once there is room, the next write takes it into the ledger and the reserve is free.
        #expect(outcome.code("after.code") == 0, "\(outcome.file("after.out") + outcome.file("after.err"))")
        #expect(outcome.file("after-list.err").isEmpty && outcome.file("after-list.out").contains("\"state\":\"revoked\""),
                "\(outcome.file("after-list.out") + outcome.file("after-list.err"))")
        #expect(outcome.file("ledger-revoked").trimmingCharacters(in: .whitespacesAndNewlines) == "\(revoked)", "the ledger itself: \(outcome.file("ledger-revoked"))")
    }

    /// Neither the ledger nor the reserve can hold it (the reserve is gone,
    /// as in a state made before it existed): nothing is revoked, and
    /// revoke says so (125); `--end-holders` still ends the holder, since no
    /// launcher can learn of the revocation.
    @Test(.enabled(if: canMount, "needs root, unshare and setpriv"), arguments: ["root", "nobody"])
    func withoutAReserveNothingIsRevokedAndTheHolderIsEnded(_ user: String) throws {
        let outcome = try play(Row(user: user, mode: "missing"))
        defer { clean(outcome) }
        try #require(outcome.code("setup.code") == 0, "the row's setup failed: \(outcome.describe)")
        #expect(outcome.code("free") == 0)
        #expect(outcome.code("revoke.code") == 125, "\(outcome.describe)")
        let err = outcome.file("revoke.err")
        #expect(err.contains("nothing was revoked: the ledger could not be written") && err.contains("has no revocation reserve"), "\(outcome.describe)")
        #expect(outcome.file("revoke.out").contains("ended pid"), "\(outcome.describe)")
        #expect(outcome.file("sandbox.code").trimmingCharacters(in: .whitespacesAndNewlines) == "143", "\(outcome.describe)")
        #expect(outcome.code("resolve.code") == 0, "nothing was revoked, and nothing says otherwise: \(outcome.file("resolve.out"))")
    }

    /// A reserve that is full fails closed: the revocation that finds no
    /// slot revokes nothing and says so; the ones before it hold.
    @Test(.enabled(if: canMount, "needs root, unshare and setpriv"))
    func aFullReserveRevokesNothingMoreAndSaysSo() throws {
        let outcome = try play(Row(user: "nobody", mode: "full"))
        defer { clean(outcome) }
        try #require(outcome.code("setup.code") == 0, "the row's setup failed: \(outcome.describe)")
        #expect(outcome.code("free") == 0)
        #expect(outcome.file("held.codes").split(separator: "\n").allSatisfy { $0 == "0" }, "\(outcome.file("held.codes"))")
        #expect(outcome.file("held.codes").split(separator: "\n").count == 31)
        #expect(outcome.code("revoke.code") == 125, "\(outcome.describe)")
        #expect(outcome.file("revoke.err").contains("nothing was revoked: the ledger could not be written")
                && outcome.file("revoke.err").contains("is full: it holds 31 revocations"), "\(outcome.describe)")
        #expect(outcome.code("resolve.code") == 0, "the grant not revoked resolves fresh: \(outcome.file("resolve.out"))")
        #expect(outcome.code("first.code") == 13, "one held before still resolves revoked")
        #expect(outcome.code("after.code") == 0, "\(outcome.file("after.out") + outcome.file("after.err"))")
        #expect(outcome.file("after-list.err").isEmpty, "\(outcome.file("after-list.err"))")
        #expect(outcome.file("ledger-revoked").trimmingCharacters(in: .whitespacesAndNewlines) == "32", "\(outcome.file("ledger-revoked"))")
    }

    /// SQLite grows the ledger's -shm a byte at the end of each 4 KiB page and
    /// writes it through a shared mapping: on ext4 of 1 KiB blocks a page kept
    /// holes, and on a disk with a few blocks left (enough for those bytes, or
    /// for a frame of the -wal, not for the rest) the first write into a hole
    /// raised SIGBUS: `revoke` and `resolve` exited 135, as root (no blocks
    /// reserved) and as uid 65534, with no launcher holding the ledger or
    /// with one (which mapped it while there was room). Here the command's
    /// part is played by a fill that leaves exactly k blocks, for each k, and
    /// every revoke and resolve must complete. On bfc715c every row had
    /// revokes killed by SIGBUS (k = 8 to 32 without a launcher, resolve too;
    /// k = 4 to 24 with one).
    @Test(.enabled(if: canLoop, "needs root, loop devices and mkfs.ext4"),
          arguments: [("root", "none"), ("nobody", "none"), ("root", "launcher"), ("nobody", "launcher")])
    func aFewBlocksLeftNeverKillTheRevocation(_ user: String, _ holder: String) throws {
        let scratch = "/var/tmp/sandboxed-run-fewblocks-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        try Self.fewBlocksScript.write(toFile: scratch + "/row.sh", atomically: true, encoding: .utf8)
        let result = try CLI.program("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/bash", scratch + "/row.sh", scratch, CLI.binary, user, holder])
        let outcome = Outcome(scratch: scratch, log: result.stdout + result.stderr)
        try #require(outcome.code("setup.code") == 0, "the setup failed: \(outcome.log)")
        // k, the blocks df said were free, revoke's status, resolve's status.
        let rows = outcome.file("results").split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(rows.count == Self.fewBlocks.count, "\(outcome.log)\n\(outcome.file("results"))")
        for row in rows where row.count == 4 {
            let k = row[0]
            #expect(row[1] == k, "k = \(k): df said \(row[1]) blocks were free")
            #expect(row[2] == "0", "k = \(k): revoke exited \(row[2]): \(outcome.file("revoke-\(k).out"))\(outcome.file("revoke-\(k).err"))")
            #expect(row[3] == "13", "k = \(k): resolve exited \(row[3]) (13: revoked): \(outcome.file("resolve-\(k).out"))")
            // Into the ledger, or held in the reserve for want of space: either way said plainly.
            let err = outcome.file("revoke-\(k).err")
            #expect(err.isEmpty || err.contains("database or disk is full") && err.contains("The revocation is held instead in"), "k = \(k): \(err)")
        }
        // Once there is room, every revocation is in the ledger.
        #expect(outcome.file("list.err").isEmpty, "\(outcome.file("list.err"))")
        #expect(outcome.file("ledger-revoked").trimmingCharacters(in: .whitespacesAndNewlines) == "\(Self.fewBlocks.count)", "\(outcome.file("ledger-revoked"))")
    }

    static let fewBlocks = [0, 1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48]

    /// $1 scratch, $2 binary, $3 root|nobody, $4 none|launcher.
    static let fewBlocksScript = #"""
        set -u
        S=$1 B=$2 WHO=$3 HOLDER=$4
        R=$S
        echo 1 > $R/setup.code
        mkdir -p $S/disk $S/run
        # Blocks of 1 KiB (smaller than a page), none reserved for root: root fills it too.
        truncate -s 32M $S/disk.img && /usr/sbin/mkfs.ext4 -q -F -b 1024 -m 0 $S/disk.img && mount -o loop $S/disk.img $S/disk && chmod 755 $S/disk || exit 90
        as=()
        if [ $WHO = nobody ]; then
            chown 65534:65534 $S/disk $S/run
            as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        fi
        as() { "${as[@]}" "$@"; }
        export HOME=$S/disk/home XDG_STATE_HOME=$S/disk/state XDG_DATA_HOME=$S/disk/data XDG_RUNTIME_DIR=$S/run PATH=/usr/bin:/bin LANG=C.UTF-8
        sandbox=
        stop() { [ -n "$sandbox" ] && { kill -9 $sandbox; wait $sandbox; } 2>/dev/null; sandbox=; }
        trap 'stop; umount -l $S/disk' EXIT
        A=com.example.fewblocks
        as mkdir -p $HOME/held && as chmod 700 $XDG_RUNTIME_DIR || exit 91
        as $B pick --app $A --select $HOME/held -o $HOME/held.bookmark >/dev/null || exit 92
        C=$(as $B run --app $A -- /bin/sh -c 'echo $SANDBOX_CONTAINER') && as cp $HOME/held.bookmark $C/ || exit 93
        echo 0 > $R/setup.code
        for k in \#(fewBlocks.map(String.init).joined(separator: " ")); do
            as rm -f $HOME/fill $HOME/fill-*
            # A grant to revoke, made while there is room (the last connection then removes -wal and -shm).
            as mkdir $HOME/f$k && as $B pick --app $A --select $HOME/f$k -o $HOME/f$k.bookmark >/dev/null || { echo "$k pick failed" >> $R/results; continue; }
            if [ $HOLDER = launcher ]; then
                # A sandbox with a live grant: its launcher opens the ledger now, with room, and keeps it open.
                rm -f $R/holder.out
                "${as[@]}" $B run --app $A -- /bin/sh -c '"$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/held.bookmark" >/dev/null && echo ready; exec sleep 600'                     < /dev/null > $R/holder.out 2>> $R/holder.err &
                sandbox=$!
                for i in $(seq 1 200); do grep -q ready $R/holder.out 2>/dev/null && break; sleep 0.05; done
                grep -q ready $R/holder.out || { echo "$k the holder did not start" >> $R/results; stop; continue; }
            fi
            # Full to the last block (what writeback gives back taken too), then k blocks freed.
            as sh -c "head -c 64000000 /dev/zero > $HOME/fill" 2>/dev/null
            for round in 1 2 3; do
                sync -f $S/disk
                i=0; while as sh -c "head -c 1024 /dev/zero > $HOME/fill-$round-$i" 2>/dev/null; do i=$((i+1)); done
            done
            [ $k -gt 0 ] && as truncate -s -${k}K $HOME/fill
            sync -f $S/disk
            free=$(df --output=avail -B1024 $S/disk | tail -1 | tr -d ' ')
            as $B grants revoke --folder $HOME/f$k --keep-holders > $R/revoke-$k.out 2> $R/revoke-$k.err; revoked=$?
            as $B resolve --app $A $HOME/f$k.bookmark > $R/resolve-$k.out 2>&1; resolved=$?
            echo "$k $free $revoked $resolved" >> $R/results
            stop
        done
        as rm -f $HOME/fill $HOME/fill-*
        # With room, a write of the ledger takes in what the reserve holds (this one revokes nothing new).
        as $B grants revoke --folder $HOME/f0 > $R/after.out 2> $R/after.err
        as $B grants list --json > $R/list.out 2> $R/list.err
        python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from grants where revoked is not null").fetchone()[0])' \
            $XDG_STATE_HOME/sandboxed-run/ledger.sqlite > $R/ledger-revoked 2>&1
        """#

    /// $1 scratch, $2 binary, $3 root|nobody, $4 mode, $5 tmpfs|ext4|btrfs.
    static let script = #"""
        set -u
        S=$1 B=$2 WHO=$3 MODE=$4 FS=$5
        R=$S  # results, on the ordinary disk
        echo 1 > $R/setup.code
        mkdir -p $S/disk $S/run
        if [ $FS = tmpfs ]; then
            mount -t tmpfs -o size=40m,mode=755 sr-fulldisk $S/disk || exit 90
        else
            truncate -s 300M $S/disk.img && /usr/sbin/mkfs.$FS -q $([ $FS = ext4 ] && echo -F) $S/disk.img >/dev/null && mount -o loop $S/disk.img $S/disk && chmod 755 $S/disk || exit 90
        fi
        # A prefix, not a function: a function sent to the background is a
        # subshell, and $! would not be the launcher (setpriv execs it).
        as=()
        if [ $WHO = nobody ]; then
            chown 65534:65534 $S/disk $S/run
            as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        fi
        as() { "${as[@]}" "$@"; }
        export HOME=$S/disk/home XDG_STATE_HOME=$S/disk/state XDG_DATA_HOME=$S/disk/data PATH=/usr/bin:/bin LANG=C.UTF-8
        export XDG_RUNTIME_DIR=$S/run  # unused: records are kept in the state folder, on the full disk
        sandbox=
        finish() {
            [ -n "$sandbox" ] && { kill -9 $sandbox; wait $sandbox; } 2>/dev/null
            umount -l $S/disk
        }
        trap finish EXIT
        A=com.example.fulldisk
        as mkdir -p $HOME/vault $HOME/other $XDG_RUNTIME_DIR && as chmod 700 $XDG_RUNTIME_DIR || exit 91
        echo secret | as tee $HOME/vault/secret >/dev/null
        as $B pick --app $A --select $HOME/vault -o $HOME/vault.bookmark >/dev/null || exit 92
        as $B pick --app $A --select $HOME/other -o $HOME/other.bookmark >/dev/null || exit 92
        C=$(as $B run --app $A -- /bin/sh -c 'echo $SANDBOX_CONTAINER') || exit 93
        as cp $HOME/vault.bookmark $HOME/other.bookmark $C/ || exit 94
        if [ $MODE = full ]; then
            for i in $(seq 1 31); do as mkdir $HOME/v$i && as $B pick --app $A --select $HOME/v$i -o $HOME/v$i.bookmark >/dev/null || exit 95; done
        fi
        [ $MODE = missing ] && rm $XDG_STATE_HOME/sandboxed-run/revocations
        # Fills the disk to the last page: one large file, then small ones for what is left.
        fill='head -c 400000000 /dev/zero > "$SANDBOX_CONTAINER/Documents/fill" 2>/dev/null; i=0; while [ $i -lt 64 ]; do head -c 4096 /dev/zero > "$SANDBOX_CONTAINER/Documents/f$i" 2>/dev/null; i=$((i+1)); done; echo filled'
        watch='while cat "$p/secret" >/dev/null 2>&1; do sleep 0.05; done; echo cut; exec sleep 600'
        view=
        case $MODE in
        live|full) args=; body='p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/vault.bookmark") || exit 9; '"$fill; $watch";;
        two) args=; body='p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/vault.bookmark") || exit 9; "$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/other.bookmark" >/dev/null || exit 8; '"$fill; $watch";;
        launch) args="--grant V=$HOME/vault.bookmark"; body='p=$SANDBOX_GRANT_V; '"$fill; $watch";;
        host|missing) args="--view host --grant V=$HOME/vault.bookmark"; body='p=$SANDBOX_GRANT_V; '"$fill; $watch";;
        esac
        # The launcher itself (setpriv execs it): what is killed at the end.
        "${as[@]}" $B run --app $A $args -- /bin/sh -c "$body" < /dev/null > $R/command.out 2>$R/command.err &
        sandbox=$!
        for i in $(seq 1 600); do grep -q filled $R/command.out 2>/dev/null && break; sleep 0.05; done
        # btrfs frees space it had reserved for a write only at its next commit: commit, and fill
        # what that freed (data, then small files kept in the metadata), until nothing more fits.
        for round in 1 2 3; do
            sync -f $S/disk 2>/dev/null
            for size in 4096 100; do
                i=0; while [ $i -lt 512 ] && as sh -c "head -c $size /dev/zero > $C/Documents/t$round-$size-$i" 2>/dev/null; do i=$((i+1)); done
            done
        done
        df --output=avail -B1 $S/disk | tail -1 | tr -d ' ' > $R/free
        echo 0 > $R/setup.code
        if [ $MODE = full ]; then
            for i in $(seq 1 31); do as $B grants revoke --folder $HOME/v$i --keep-holders >/dev/null 2>&1; echo $? >> $R/held.codes; done
        fi
        end=--keep-holders
        case $MODE in host|missing) end=--end-holders;; esac
        case $MODE in two|full) what="--folder $HOME/vault";; *) what="--app $A";; esac
        as $B grants revoke $what $end > $R/revoke.out 2> $R/revoke.err; echo $? > $R/revoke.code
        # revoke --end-holders returns once its holder ended: its status is
        # there to take (bounded: on a build that could not end it, it runs on).
        ended() { [ ! -e /proc/$1 ] || grep -q ') Z ' /proc/$1/stat; }
        case $MODE in host|missing)
            for i in $(seq 1 100); do ended $sandbox && break; sleep 0.05; done
            if ended $sandbox; then wait $sandbox; echo $? > $R/sandbox.code; sandbox=; else echo running > $R/sandbox.code; fi;;
        esac
        for i in $(seq 1 100); do grep -q cut $R/command.out && break; sleep 0.05; done
        as $B grants holders > $R/holders.out 2>&1
        as $B resolve --app $A $HOME/vault.bookmark > $R/resolve.out 2>&1; echo $? > $R/resolve.code
        [ $MODE = full ] && { as $B resolve --app $A $HOME/v1.bookmark >/dev/null 2>&1; echo $? > $R/first.code; }
        as $B grants list --json > $R/list.out 2> $R/list.err
        # The command ends and its files go: room again.
        [ -n "$sandbox" ] && { kill -9 $sandbox; wait $sandbox; sandbox=; }
        rm -f $C/Documents/fill
        as $B grants revoke $what > $R/after.out 2> $R/after.err; echo $? > $R/after.code
        as $B grants list --json > $R/after-list.out 2> $R/after-list.err
        python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from grants where revoked is not null").fetchone()[0])' \
            $XDG_STATE_HOME/sandboxed-run/ledger.sqlite > $R/ledger-revoked 2>&1
        """#
}
