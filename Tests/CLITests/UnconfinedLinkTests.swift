import Foundation
import Testing

/// The unconfined commands (append, coordinate, sync-simulator, versions,
/// bookmark files, policy files, pick --select) walk a path the user gave
/// without following a link an app could have planted: not only in its live
/// grants and container, but in every folder this state ever let an app
/// write (a revoked or moved grant, a policy's read-write folder), and in
/// folders someone other than the invoking user can write. Each test first
/// shows the kernel following the planted link (the attack works unconfined).
@Suite struct UnconfinedLinkTests {
    /// A vault granted read-write, a link the app planted in it, a file outside.
    final class Scene {
        let home = CLI.Home()
        var vault: String { home.path + "/Vault" }
        var outside: String { home.path + "/outside" }
        var bookmark: String { home.path + "/vault.bookmark" }

        init(app: String = "com.example.memo") throws {
            try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try "private\n".write(toFile: outside + "/notes.md", atomically: false, encoding: .utf8)
            let picked = try run(["pick", "--app", app, "--select", vault, "-o", bookmark])
            #expect(picked.status == 0, "\(picked)")
            // What the app did from inside its grant:
            #expect(symlink(outside, vault + "/Daily") == 0)
            // The attack works where nothing checks: the kernel follows the link.
            #expect(FileManager.default.fileExists(atPath: vault + "/Daily/notes.md"))
        }

        func run(_ arguments: [String]) throws -> CLI.Result { try CLI.run(arguments, home: home) }

        var untouched: Bool {
            (try? String(contentsOfFile: outside + "/notes.md", encoding: .utf8)) == "private\n"
                && (try? FileManager.default.contentsOfDirectory(atPath: outside)) == ["notes.md"]
        }

        /// Every unconfined command refuses the path through the link, and writes nothing there.
        func expectEveryCommandRefuses(_ through: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let commands: [[String]] = [
                ["append", through + "/notes.md", "planted"],
                ["coordinate", "--write", through + "/notes.md", "--", "/bin/sh", "-c", "echo planted >> \"$COORDINATED_PATH\""],
                ["sync-simulator", through, "--seconds", "0.3", "--evict-rate", "1000", "--leave-placeholders"],
                ["versions", "resolve", through + "/notes.md"],
            ]
            for command in commands {
                let result = try run(command)
                #expect(result.status == 125, "\(command): \(result)", sourceLocation: sourceLocation)
                #expect(result.stderr.contains("is a symbolic link inside a folder an app can write or once could"),
                        "\(command): \(result.stderr)", sourceLocation: sourceLocation)
            }
            let left = (try? FileManager.default.contentsOfDirectory(atPath: outside)) ?? []
            #expect(untouched, "\(left)", sourceLocation: sourceLocation)
        }
    }

    @Test func aLinkInALiveGrantIsRefused() throws {
        let scene = try Scene()
        try scene.expectEveryCommandRefuses(scene.vault + "/Daily")
    }

    /// The user revokes the app, exactly when they distrust it: what it
    /// planted stays, and must stay untrusted.
    @Test func aLinkInARevokedGrantIsRefused() throws {
        let scene = try Scene()
        let revoked = try scene.run(["grants", "revoke", "--app", "com.example.memo"])
        #expect(revoked.stdout == "revoked 1 grant\n", "\(revoked)")
        try scene.expectEveryCommandRefuses(scene.vault + "/Daily")
    }

    /// The vault moved (the ledger still has its old path): found by its
    /// handle along the link's ancestors, with no privilege needed.
    @Test func aLinkInAMovedGrantIsRefused() throws {
        let scene = try Scene()
        let moved = scene.home.path + "/Archive/Vault"
        try FileManager.default.createDirectory(atPath: scene.home.path + "/Archive", withIntermediateDirectories: true)
        #expect(rename(scene.vault, moved) == 0)
        try scene.expectEveryCommandRefuses(moved + "/Daily")
        // Deeper, and after the grant is revoked too.
        try FileManager.default.createDirectory(atPath: moved + "/sub", withIntermediateDirectories: true)
        #expect(symlink(scene.outside, moved + "/sub/Deep") == 0)
        _ = try scene.run(["grants", "revoke", "--app", "com.example.memo"])
        try scene.expectEveryCommandRefuses(moved + "/sub/Deep")
    }

    /// A link another app planted is refused for every app, and a bookmark
    /// file reached through it is never read or written.
    @Test func aBookmarkReachedThroughAnotherAppsLinkIsRefused() throws {
        let scene = try Scene(app: "com.example.a")
        _ = try scene.run(["grants", "revoke", "--app", "com.example.a"])
        let other = scene.home.path + "/OtherVault"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        // The bookmark of app C, as the user would keep it, is in the folder A's link leads to.
        let picked = try scene.run(["pick", "--app", "com.example.c", "--select", other, "-o", scene.outside + "/c.bookmark"])
        #expect(picked.status == 0, "\(picked)")
        let run = try scene.run(["run", "--app", "com.example.c", "--grant", "V=" + scene.vault + "/Daily/c.bookmark", "--", "/bin/true"])
        #expect(run.status == 125, "\(run)")
        #expect(run.stderr.contains("is a symbolic link inside a folder an app can write or once could"), "\(run.stderr)")
        let resolve = try scene.run(["resolve", "--app", "com.example.c", scene.vault + "/Daily/c.bookmark"])
        #expect(resolve.status == 125, "\(resolve)")
        let pickAgain = try scene.run(["pick", "--app", "com.example.c", "--select", other, "-o", scene.vault + "/Daily/new.bookmark"])
        #expect(pickAgain.status == 125, "\(pickAgain)")
        #expect(!FileManager.default.fileExists(atPath: scene.outside + "/new.bookmark"))
        // Through the real path, the same bookmark works.
        let direct = try scene.run(["run", "--app", "com.example.c", "--grant", "V=" + scene.outside + "/c.bookmark", "--", "/bin/true"])
        #expect(direct.status == 0, "\(direct)")
    }

    /// `pick --select` of a path through a planted link would grant the app
    /// what the link leads to (`Daily -> ~/.ssh`).
    @Test func pickSelectThroughAPlantedLinkGrantsNothing() throws {
        let scene = try Scene()
        _ = try scene.run(["grants", "revoke", "--app", "com.example.memo"])
        let result = try scene.run(["pick", "--app", "com.example.memo", "--select", scene.vault + "/Daily", "-o", scene.home.path + "/b.bookmark"])
        #expect(result.status == 125, "\(result)")
        #expect(result.stderr.contains("--select"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: scene.home.path + "/b.bookmark"))
        let listed = try scene.run(["grants", "list", "--json"]).stdout
        #expect(!listed.contains(scene.outside), "\(listed)")
    }

    /// A folder a policy makes writable is recorded before the launch, so a
    /// link the command plants there is never followed afterwards.
    @Test func aLinkInAPolicysReadWriteFolderIsRefused() throws {
        let home = CLI.Home()
        let shared = home.path + "/shared", outside = home.path + "/outside"
        for folder in [shared, outside] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        try "private\n".write(toFile: outside + "/notes.md", atomically: false, encoding: .utf8)
        let policy = home.path + "/policy.json"
        try #"{"org.sandboxed-run.system-paths.read-execute": ["/usr", "/bin", "/lib", "/lib64"], "org.sandboxed-run.system-paths.read-write": ["\#(shared)"], "org.sandboxed-run.files.symbolic-links": true}"#
            .write(toFile: policy, atomically: true, encoding: .utf8)
        // (--supervise-metadata: the read-only mounts leave a policy's read-write folders read-only, a bug of their own.)
        let planted = try CLI.run(["run", "--app", "com.example.memo", "--policy", policy, "--supervise-metadata", "--",
                                   "/bin/ln", "-s", outside, shared + "/Daily"], home: home)
        #expect(planted.status == 0, "\(planted)")
        #expect(FileManager.default.fileExists(atPath: shared + "/Daily/notes.md"))
        let append = try CLI.run(["append", shared + "/Daily/notes.md", "planted"], home: home)
        #expect(append.status == 125, "\(append)")
        #expect(append.stderr.contains("or a policy's read-write folder"), "\(append.stderr)")
        #expect(try String(contentsOfFile: outside + "/notes.md", encoding: .utf8) == "private\n")
    }

    /// `--denials FILE` is a path the launcher writes: never through a link an
    /// app planted, never where an app could write (it would forge the log, or
    /// have the launcher append to a file it chose), never another user's file.
    @Test func theDenialsLogIsWalkedAndPlacedAsEveryUnconfinedPath() throws {
        let scene = try Scene()
        _ = try scene.run(["grants", "revoke", "--app", "com.example.memo"])
        func run(_ log: String) throws -> CLI.Result {
            try scene.run(["run", "--app", "com.example.other", "--denials", log, "--", "/bin/cat", "/etc/shadow"])
        }
        let through = try run(scene.vault + "/Daily/notes.md")
        #expect(through.status == 125 && through.stderr.contains("is a symbolic link inside a folder an app can write or once could"), "\(through)")
        let inside = try run(scene.vault + "/denials.jsonl")
        #expect(inside.status == 125 && inside.stderr.contains("it lies inside a folder an app can write or once could"), "\(inside)")
        #expect(!FileManager.default.fileExists(atPath: scene.vault + "/denials.jsonl"))
        #expect(scene.untouched)
        let fine = try run(scene.home.path + "/denials.jsonl")
        #expect(fine.status == 1 && FileManager.default.fileExists(atPath: scene.home.path + "/denials.jsonl"), "\(fine)")
    }

    /// Links the user made outside every app's folders are followed as before.
    @Test func theUsersOwnLinksAreFollowed() throws {
        let scene = try Scene()
        #expect(symlink(scene.vault, scene.home.path + "/VaultLink") == 0)
        let result = try scene.run(["append", scene.home.path + "/VaultLink/today.md", "fine"])
        #expect(result.status == 0, "\(result)")
        #expect(try String(contentsOfFile: scene.vault + "/today.md", encoding: .utf8) == "fine\n")
    }

    /// A state that exists but cannot be read: no folder can be told apart
    /// from an app's, so no link is followed (a missing state knows no grant).
    @Test func anUnreadableStateTrustsNoLink() throws {
        let scene = try Scene()
        #expect(symlink(scene.vault, scene.home.path + "/VaultLink") == 0)
        let keys = scene.home.path + "/state/sandboxed-run/keys"
        #expect(chmod(keys, 0o755) == 0)
        defer { chmod(keys, 0o700) }
        let result = try scene.run(["append", scene.home.path + "/VaultLink/today.md", "fine"])
        #expect(result.status == 125, "\(result)")
        #expect(result.stderr.contains("may be an app's"), "\(result.stderr)")
        // A path without links needs no state at all.
        #expect(try scene.run(["append", scene.vault + "/today.md", "fine"]).status == 0)
    }
}

/// Root acting in a user's folders (sudo, cron) has its own state, which
/// knows nothing of that user's grants: a link in a folder someone else can
/// write is refused, as OpenSSH refuses files others could have written.
@Suite(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
                "needs root, to make folders of another user and run as one"))
struct OtherUsersLinkTests {
    @Test func rootDoesNotFollowALinkInAFolderAnotherUserCanWrite() throws {
        let home = CLI.Home()
        let users = home.path + "/home-of-nobody", outside = home.path + "/outside"
        for folder in [users, outside] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        try "private\n".write(toFile: outside + "/notes.md", atomically: false, encoding: .utf8)
        #expect(symlink(outside, users + "/Daily") == 0)
        #expect(chown(users, 65534, 65534) == 0)
        let refused = try CLI.run(["append", users + "/Daily/notes.md", "planted"], home: home)
        #expect(refused.status == 125, "\(refused)")
        #expect(refused.stderr.contains("owned by user 65534"), "\(refused.stderr)")
        // World-writable, even if root owns it.
        #expect(chown(users, 0, 0) == 0 && chmod(users, 0o1777) == 0)
        let open = try CLI.run(["append", users + "/Daily/notes.md", "planted"], home: home)
        #expect(open.status == 125 && open.stderr.contains("others can write"), "\(open)")
        #expect(try String(contentsOfFile: outside + "/notes.md", encoding: .utf8) == "private\n")
        // Root's own folder: the link is followed.
        #expect(chmod(users, 0o755) == 0)
        let followed = try CLI.run(["append", users + "/Daily/notes.md", "mine"], home: home)
        #expect(followed.status == 0, "\(followed)")
    }

    /// A policy file another user could have written is no policy of root's
    /// (as OpenSSH refuses such files): owned by another user, or writable by
    /// others, or in a folder another user owns. /tmp (sticky) may hold one.
    @Test func rootRefusesAPolicyAnotherUserCouldHaveWritten() throws {
        let home = CLI.Home()
        let theirs = home.path + "/theirs", target = home.path + "/target"
        for folder in [theirs, target] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        let policy = #"{"org.sandboxed-run.system-paths.read-execute": ["/usr", "/bin", "/lib", "/lib64"], "org.sandboxed-run.system-paths.read-write": ["\#(target)"]}"#
        func run(_ file: String) throws -> CLI.Result {
            try CLI.run(["run", "--app", "com.example.memo", "--policy", file, "--supervise-metadata", "--", "/bin/sh", "-c", "echo pwned > \(target)/victim"], home: home)
        }
        // Written by another user, in their folder: the attack works where nothing checks owners.
        try policy.write(toFile: theirs + "/p.json", atomically: false, encoding: .utf8)
        #expect(chown(theirs, 65534, 65534) == 0 && chown(theirs + "/p.json", 65534, 65534) == 0)
        let owned = try run(theirs + "/p.json")
        #expect(owned.status == 125 && owned.stderr.contains("belongs to user 65534"), "\(owned)")
        // Root's own file, but others may write it.
        #expect(chown(theirs, 0, 0) == 0 && chown(theirs + "/p.json", 0, 0) == 0 && chmod(theirs + "/p.json", 0o666) == 0)
        let writable = try run(theirs + "/p.json")
        #expect(writable.status == 125 && writable.stderr.contains("others can write it"), "\(writable)")
        // Root's file in a folder another user owns (who could swap it).
        #expect(chmod(theirs + "/p.json", 0o644) == 0 && chown(theirs, 65534, 65534) == 0)
        let folder = try run(theirs + "/p.json")
        #expect(folder.status == 125 && folder.stderr.contains("a folder above it belongs to user 65534"), "\(folder)")
        #expect(!FileManager.default.fileExists(atPath: target + "/victim"))
        // Root's own, in root's folders under the sticky /tmp: accepted.
        #expect(chown(theirs, 0, 0) == 0)
        let mine = try run(theirs + "/p.json")
        #expect(mine.status == 0, "\(mine)")
        #expect(FileManager.default.fileExists(atPath: target + "/victim"))
    }

    /// An unprivileged user follows links in folders of its own and of root,
    /// never in another user's.
    @Test func anUnprivilegedUserFollowsOnlyItsOwnAndRootsLinks() throws {
        let home = CLI.Home()
        let target = home.path + "/target", mine = home.path + "/mine", theirs = home.path + "/theirs"
        for folder in [target, mine, theirs] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        #expect(symlink(target, mine + "/Daily") == 0 && symlink(target, theirs + "/Daily") == 0)
        #expect(symlink(target, home.path + "/RootsLink") == 0)
        for path in [home.path, home.path + "/state", home.path + "/data"] { chmod(path, 0o755) }
        for path in [target, mine] { #expect(chown(path, 65534, 65534) == 0) }
        #expect(chown(theirs, 4321, 4321) == 0)
        let user = home.path + "/unprivileged-home"
        try FileManager.default.createDirectory(atPath: user, withIntermediateDirectories: true)
        #expect(chown(user, 65534, 65534) == 0)
        func append(_ path: String) throws -> CLI.Result {
            try CLI.program("/usr/bin/setpriv", ["--reuid", "65534", "--regid", "65534", "--clear-groups", CLI.binary, "append", path, "line"],
                            environment: ["HOME": user, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"])
        }
        #expect(try append(mine + "/Daily/a.md").status == 0)
        #expect(try append(home.path + "/RootsLink/b.md").status == 0)
        let refused = try append(theirs + "/Daily/c.md")
        #expect(refused.status == 125 && refused.stderr.contains("owned by user 4321"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: target + "/c.md"))
    }
}
