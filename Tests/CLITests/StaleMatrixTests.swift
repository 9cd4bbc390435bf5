import Foundation
import Testing

/// Every way the picked folder can stop being at its path, and what
/// `resolve` must say about it, as root (CAP_DAC_READ_SEARCH: the file
/// handle finds the folder) and as uid 65534 (no handles: a bounded search,
/// or "cannot tell"); and that `run --on-stale follow` launches only into a
/// fresh or moved folder, and rewrites the bookmark only for a moved one.
///
/// Each row runs as a shell script in a private mount namespace
/// (`unshare -m --propagation private`): mounts are made on scratch folders
/// only, unmounted when the script ends, and cannot outlive its namespace.
/// Loop devices are attached with autoclear, so they go when unmounted.
@Suite struct StaleMatrixTests {
    /// What resolution must say in one row, for one user.
    struct Expected: Sendable {
        let status: String
        /// Where it must say the folder is (`$S` is the scratch folder).
        var path: String?
        /// A fragment the message must hold.
        var message: String?
        /// For a fresh folder the launch still refuses: a fragment of why.
        var refusal: String?

        static func fresh(_ path: String = "$F") -> Expected { Expected(status: "fresh", path: path) }
        static func moved(_ path: String) -> Expected { Expected(status: "moved", path: path) }
        static let missing = Expected(status: "missing")
        static let replaced = Expected(status: "replaced")
        static func covered(by mount: String) -> Expected { Expected(status: "covered", message: "another filesystem is mounted on \(mount)") }
    }

    /// One cell of the matrix. `setup` runs before both picks, `change`
    /// after them, as root; `$F` is the folder picked.
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        /// The folder picked, made after `setup` if missing.
        var folder = "$S/user/vault"
        var setup = ""
        let change: String
        let root: Expected
        let nobody: Expected
        var testDescription: String { name }
    }

    static let exitCodes = ["fresh": 0, "moved": 10, "replaced": 11, "missing": 12, "covered": 16, "inaccessible": 17]

    static let isRoot = getuid() == 0
    static let canMount = isRoot && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
    static let canLoop = canMount && FileManager.default.fileExists(atPath: "/dev/loop-control")
        && FileManager.default.isExecutableFile(atPath: "/usr/sbin/mkfs.ext4")
    static let canBtrfs = canLoop && FileManager.default.isExecutableFile(atPath: "/usr/bin/btrfs")
        && FileManager.default.isExecutableFile(atPath: "/usr/sbin/mkfs.btrfs")
        && ((try? String(contentsOfFile: "/proc/filesystems", encoding: .utf8))?.contains("\tbtrfs\n") ?? false)

    /// Rows that need only root and tmpfs or bind mounts.
    static let anyFilesystem: [Row] = [
        Row(name: "renamed", change: "mv $F $S/user/vault-renamed",
            root: .moved("$S/user/vault-renamed"), nobody: .moved("$S/user/vault-renamed")),
        Row(name: "moved to another folder", change: "mkdir -p $S/user/archive/2026 && mv $F $S/user/archive/2026/vault",
            root: .moved("$S/user/archive/2026/vault"), nobody: .moved("$S/user/archive/2026/vault")),
        Row(name: "its parent moved", folder: "$S/user/notes/vault", change: "mv $S/user/notes $S/user/old-notes",
            root: .moved("$S/user/old-notes/vault"), nobody: .moved("$S/user/old-notes/vault")),
        Row(name: "moved to another filesystem (a copy, then a delete)", setup: "mkdir $S/other && mount -t tmpfs sr-test $S/other",
            change: "mv $F $S/other/vault", root: .missing, nobody: .missing),
        Row(name: "deleted", change: "rmdir $F", root: .missing, nobody: .missing),
        Row(name: "deleted and made again", change: "rmdir $F && mkdir $F", root: .replaced, nobody: .replaced),
        Row(name: "replaced by a link to another folder", change: "mkdir $S/user/elsewhere && rmdir $F && ln -s $S/user/elsewhere $F",
            root: .replaced, nobody: .replaced),
        Row(name: "moved, and a link to it left in its place", change: "mv $F $S/user/real && ln -s $S/user/real $F",
            root: .moved("$S/user/real"), nobody: .moved("$S/user/real")),
        Row(name: "a tmpfs mounted on it", change: "mount -t tmpfs sr-test $F",
            root: .covered(by: "$F"), nobody: .covered(by: "$F")),
        Row(name: "a tmpfs mounted on its parent, a folder of its name planted there", folder: "$S/user/notes/vault",
            change: "mount -t tmpfs sr-test $S/user/notes && mkdir $S/user/notes/vault",
            root: .covered(by: "$S/user/notes"), nobody: .covered(by: "$S/user/notes")),
        Row(name: "another folder of its filesystem bind-mounted on it", change: "mkdir $S/user/decoy && mount --bind $S/user/decoy $F",
            root: .covered(by: "$F"), nobody: .covered(by: "$F")),
        Row(name: "bind-mounted elsewhere as well", change: "mkdir $S/user/view && mount --bind $F $S/user/view",
            root: .fresh(), nobody: .fresh()),
        Row(name: "bind-mounted on itself", change: "mount --bind $F $F", root: .fresh(), nobody: .fresh()),
        Row(name: "moved, then a tmpfs mounted where it was", change: "mv $F $S/user/aside && mkdir $F && mount -t tmpfs sr-test $F",
            root: .moved("$S/user/aside"), nobody: .moved("$S/user/aside")),
        // Root reads the handle: the folder is gone. Without it, what lies
        // beneath the mount cannot be told, and the mount is named.
        Row(name: "deleted, then a tmpfs mounted where it was", change: "rmdir $F && mkdir $F && mount -t tmpfs sr-test $F",
            root: .replaced, nobody: .covered(by: "$F")),
        Row(name: "its parent made unsearchable", folder: "$S/user/locked/vault", change: "chmod 000 $S/user/locked",
            root: .fresh(), nobody: Expected(status: "inaccessible", message: "may not search $S/user/locked (mode 0000, owner uid 0)")),
        // Its place among the protected folders cannot be proven without
        // walking up from it, which needs search permission on it.
        Row(name: "itself made unsearchable", change: "chmod 000 $F", root: .fresh(),
            nobody: Expected(status: "fresh", path: "$F", refusal: "could not be walked from it (Permission denied)")),
    ]

    /// Rows on an ext4 filesystem in a scratch image, loop-mounted at $S/disk.
    static let disk = "truncate -s 16M $S/disk.img && mkfs.ext4 -q -F $S/disk.img && mkdir $S/disk && mount -o loop $S/disk.img $S/disk"
    /// Unmounts $S/disk and mounts the image again on another loop device:
    /// the old one is held open meanwhile, so that it cannot be reused.
    static let remount = """
        exec 9<"$(findmnt -n -o SOURCE $S/disk)" && before=$(stat -c %d $S/disk) && umount $S/disk \
        && L=$(losetup -f --show $S/disk.img) && mount "$L" $S/disk && losetup -d "$L" && exec 9<&- \
        && [ "$(stat -c %d $S/disk)" != "$before" ]
        """
    static let diskRows: [Row] = [
        Row(name: "its filesystem unmounted", folder: "$S/disk/vault", setup: disk, change: "umount $S/disk",
            root: Expected(status: "missing", message: "is that filesystem unmounted"),
            nobody: Expected(status: "missing", message: "is that filesystem unmounted")),
        Row(name: "its filesystem mounted again, on another device", folder: "$S/disk/vault", setup: disk, change: remount, root: .fresh(), nobody: .fresh()),
        Row(name: "its filesystem mounted again, on another device, and it renamed", folder: "$S/disk/vault", setup: disk, change: remount + " && mv $F $S/disk/renamed",
            root: .moved("$S/disk/renamed"), nobody: .moved("$S/disk/renamed")),
        // Known limit: only folders above the old path are looked in.
        Row(name: "its filesystem mounted again elsewhere", folder: "$S/disk/vault", setup: disk, change: "umount $S/disk && mkdir $S/disk2 && mount -o loop $S/disk.img $S/disk2",
            root: Expected(status: "missing", message: "is that filesystem unmounted"),
            nobody: Expected(status: "missing", message: "is that filesystem unmounted")),
    ]

    /// Rows on btrfs, where every subvolume has its own st_dev and a snapshot
    /// keeps the inode numbers but not the file handles.
    static let btrfs = "truncate -s 128M $S/b.img && mkfs.btrfs -q $S/b.img >/dev/null && mkdir $S/b && mount -o loop $S/b.img $S/b"
    static let btrfsRows: [Row] = [
        Row(name: "btrfs: a subvolume renamed aside, a snapshot of it put at its name",
            folder: "$S/b/vault", setup: btrfs + " && btrfs -q subvolume create $S/b/vault",
            change: "mv $F $S/b/vault-aside && btrfs -q subvolume snapshot $S/b/vault-aside $F",
            root: .moved("$S/b/vault-aside"), nobody: .moved("$S/b/vault-aside")),
        Row(name: "btrfs: the subvolume holding it rolled back to a snapshot",
            folder: "$S/b/home/vault", setup: btrfs + " && btrfs -q subvolume create $S/b/home",
            change: "mv $S/b/home $S/b/home-old && btrfs -q subvolume snapshot $S/b/home-old $S/b/home",
            root: .moved("$S/b/home-old/vault"), nobody: .moved("$S/b/home-old/vault")),
        Row(name: "btrfs: a subvolume deleted, a snapshot of another put at its name",
            folder: "$S/b/vault", setup: btrfs + " && btrfs -q subvolume create $S/b/vault && btrfs -q subvolume create $S/b/other",
            change: "btrfs -q subvolume delete $F >/dev/null && btrfs -q subvolume snapshot $S/b/other $F",
            root: .replaced, nobody: .replaced),
        Row(name: "btrfs: a tmpfs mounted on a folder in a subvolume",
            folder: "$S/b/home/vault", setup: btrfs + " && btrfs -q subvolume create $S/b/home",
            change: "mount -t tmpfs sr-test $F", root: .covered(by: "$F"), nobody: .covered(by: "$F")),
    ]

    /// The user's folders ($S/user) are on a filesystem the test makes, so
    /// that the answers do not depend on what holds the temporary folder
    /// (overlayfs, in a container, gives no file handle that opens).
    static let userOnTmpfs = "mount -t tmpfs -o mode=755 sr-user $S/user"
    static let userOnExt4 = "truncate -s 32M $S/user.img && mkfs.ext4 -q -F $S/user.img && mount -o loop $S/user.img $S/user"

    @Test(.enabled(if: canMount, "needs root, unshare and setpriv: mounts in a private namespace, and uid 65534"), arguments: anyFilesystem)
    func onTmpfs(_ row: Row) throws { try check(row, user: Self.userOnTmpfs) }

    @Test(.enabled(if: canLoop, "needs root, loop devices and mkfs.ext4"), arguments: anyFilesystem)
    func onExt4(_ row: Row) throws { try check(row, user: Self.userOnExt4) }

    @Test(.enabled(if: canLoop, "needs root, loop devices and mkfs.ext4"), arguments: diskRows)
    func onALoopDisk(_ row: Row) throws { try check(row, user: Self.userOnTmpfs) }

    @Test(.enabled(if: canBtrfs, "needs root, loop devices, btrfs-progs (scripts/install-deps) and btrfs in the kernel"), arguments: btrfsRows)
    func onBtrfs(_ row: Row) throws { try check(row, user: Self.userOnTmpfs) }

    /// Runs the row's script; for each user: the resolve JSON and exit
    /// code, then `run --on-stale follow`'s exit code and whether the
    /// bookmark changed.
    func check(_ row: Row, user: String) throws {
        let scratch = NSTemporaryDirectory() + "sandboxed-run-stale-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            set -eu
            S=$1 B=$2
            cleanup() {
                chmod -R u+rwx $S/user 2>/dev/null || true
                findmnt -rn -o TARGET | grep "^$S/" | sort -r | while read -r target; do umount -l "$target"; done
            }
            trap cleanup EXIT
            mkdir -p $S/user $S/nobody
            \(user)
            F=\(row.folder)
            \(row.setup.isEmpty ? ":" : row.setup)
            mkdir -p $F
            chown 65534:65534 $S/nobody
            as_root() { env XDG_STATE_HOME=$S/root XDG_DATA_HOME=$S/root/data HOME=$S/root "$B" "$@"; }
            as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env XDG_STATE_HOME=$S/nobody XDG_DATA_HOME=$S/nobody/data HOME=$S/nobody "$B" "$@"; }
            as_root pick --app com.example.memo --select $F -o $S/root.bookmark >/dev/null
            as_nobody pick --app com.example.memo --select $F -o $S/nobody/nobody.bookmark >/dev/null
            cp $S/root.bookmark $S/root.before && cp $S/nobody/nobody.bookmark $S/nobody.before
            \(row.change)
            for user in root nobody; do
                bookmark=$S/root.bookmark; [ $user = nobody ] && bookmark=$S/nobody/nobody.bookmark
                code=0; json=$(as_$user resolve --app com.example.memo --json $bookmark) || code=$?
                ran=0; as_$user run --app com.example.memo --grant V=$bookmark --on-stale follow -- /bin/true 2>$S/$user.run.err || ran=$?
                changed=no; cmp -s $bookmark $S/$user.before || changed=yes
                echo "$user $code $ran $changed $json"
            done
            """
        try script.write(toFile: scratch + "/row.sh", atomically: true, encoding: .utf8)
        let result = try CLI.program("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/bash", scratch + "/row.sh", scratch, CLI.binary])
        try #require(result.status == 0, "the row's script failed: \(result.stderr)")
        let expand = { (text: String) in text.replacingOccurrences(of: "$F", with: row.folder).replacingOccurrences(of: "$S", with: scratch) }
        let lines = result.stdout.split(separator: "\n")
        try #require(lines.count == 2, "\(result.stdout)")
        for (line, (user, expected)) in zip(lines, [("root", row.root), ("nobody", row.nobody)]) {
            let fields = line.split(separator: " ", maxSplits: 4).map(String.init)
            try #require(fields.count == 5 && fields[0] == user, "\(line)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(fields[4].utf8)) as? [String: Any], "\(line)")
            let status = report["status"] as? String
            let message = report["message"] as? String ?? ""
            #expect(status == expected.status, "\(user): \(message)")
            #expect(Int(fields[1]) == Self.exitCodes[expected.status], "\(user): exit \(fields[1])")
            if let path = expected.path { #expect(report["path"] as? String == expand(path), "\(user): \(message)") }
            if let fragment = expected.message { #expect(message.contains(expand(fragment)), "\(user): \(message)") }
            if expected.status == "moved" {
                #expect((report["method"] as? String)?.contains(user == "root" ? "open_by_handle_at" : "search") == true, "\(user): \(report)")
            }
            // Only a fresh or moved folder is launched into; only a moved one rewrites the bookmark.
            let launches = (expected.status == "fresh" || expected.status == "moved") && expected.refusal == nil
            let refusal = (try? String(contentsOfFile: "\(scratch)/\(user).run.err", encoding: .utf8)) ?? ""
            #expect((fields[2] == "0") == launches, "\(user): run --on-stale follow exited \(fields[2]): \(refusal)")
            if let fragment = expected.refusal { #expect(refusal.contains(expand(fragment)), "\(user): \(refusal)") }
            #expect((fields[3] == "yes") == (expected.status == "moved"), "\(user): bookmark changed: \(fields[3])")
        }
    }
}
