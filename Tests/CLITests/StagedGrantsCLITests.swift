import Foundation
import Testing

/// Staged grants from the command line (issue #32): `run --review` and the
/// policy key stage what a hostile command does to a granted folder, and
/// `sandboxed-run review` lists, diffs, accepts and rejects it, by host
/// path. As root and as uid 65534 (through setpriv) where they differ: the
/// launcher's namespaces, the clone's and the folder's owners, the apply.
@Suite struct StagedGrantsCLITests {
    static let app = "com.example.staged"
    static let canBecomeNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
    static let nobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    /// Root, and uid 65534 where this machine can become it.
    static let users: [uid_t?] = canBecomeNobody ? [nil, 65534] : [nil]

    /// A person's vault, granted read-write to `app` (its bookmark picked),
    /// and the CLI run as that person.
    final class Vault {
        let home = CLI.Home()
        let user: uid_t?
        var folder: String { home.path + "/Vault" }
        var bookmark: String { home.path + "/vault.bookmark" }

        static let files: [(String, String)] = [
            ("a.txt", "alpha\n"), ("t.txt", "truncate me\n"), ("t2.txt", "shorten me\n"), ("del.txt", "delete me\n"),
            ("m", "mode\n"), ("d/f", "eff\n"), ("p/q", "queue\n"), ("x/keep", "keep\n"), ("e/g", "gee\n"),
            ("big/one", "one\n"), ("big/sub/two", "two\n"),
        ]

        init(as user: uid_t? = nil, files: [(String, String)] = Vault.files) throws {
            self.user = user
            for (name, contents) in files {
                let path = folder + "/" + name
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try contents.write(toFile: path, atomically: false, encoding: .utf8)
                chmod(path, 0o644)
            }
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            if user != nil { #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0) }
            let picked = try cli(["pick", "--app", StagedGrantsCLITests.app, "--select", folder, "-o", bookmark])
            try #require(picked.status == 0, "\(picked)")
        }

        /// The CLI as the vault's person, from `directory` (default: the home).
        func cli(_ arguments: [String], in directory: String? = nil) throws -> CLI.Result {
            let (process, out, err) = try start(arguments, in: directory)
            let (stdout, stderr) = try readOutputs(out, err)
            process.waitUntilExit()
            let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
            return CLI.Result(status: status, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
        }

        func start(_ arguments: [String], in directory: String? = nil) throws -> (Process, Pipe, Pipe) {
            let process = Process()
            if user != nil {
                process.executableURL = URL(fileURLWithPath: StagedGrantsCLITests.nobody[0])
                process.arguments = Array(StagedGrantsCLITests.nobody.dropFirst()) + [CLI.binary] + arguments
            } else {
                process.executableURL = URL(fileURLWithPath: CLI.binary)
                process.arguments = arguments
            }
            process.environment = home.environment
            process.currentDirectoryURL = URL(fileURLWithPath: directory ?? home.path)
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            process.standardInput = FileHandle.nullDevice
            try process.run()
            return (process, out, err)
        }

        /// `run` of `script` (sh, in the staged folder: $V) with `options`.
        func run(_ script: String, _ options: [String] = ["--review"]) throws -> CLI.Result {
            try cli(runArguments(script, options))
        }

        func runArguments(_ script: String, _ options: [String] = ["--review"]) -> [String] {
            ["run", "--app", StagedGrantsCLITests.app, "--grant", "V=\(bookmark)"] + options
                + ["--", "/bin/sh", "-c", "cd \"$SANDBOX_GRANT_V\" && V=\"$SANDBOX_GRANT_V\" && " + script]
        }

        func review(_ words: [String], in directory: String? = nil) throws -> CLI.Result {
            try cli(["review"] + Array(words.prefix(1)) + ["--app", StagedGrantsCLITests.app] + words.dropFirst(), in: directory)
        }

        /// `review list --json`, parsed: one object per change.
        func changes() throws -> [[String: Any]] {
            let listed = try review(["list", "--json"])
            try #require(listed.status == 0, "\(listed)")
            let data = Data(listed.stdout.utf8)
            return try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]], "\(listed.stdout)")
        }

        /// Each change as "KIND PATH" or "renamed PATH from FROM", paths relative to the folder.
        func changeLines() throws -> [String] {
            try changes().map { change in
                let path = (change["path"] as? String ?? "?").replacingOccurrences(of: folder + "/", with: "")
                let kind = change["change"] as? String ?? "?"
                guard let from = change["from"] as? String else { return "\(kind) \(path)" }
                return "\(kind) \(path) from \(from.replacingOccurrences(of: folder + "/", with: ""))"
            }.sorted()
        }

        /// The staged tree (the clone in the broker's state).
        var clone: String? {
            let app = home.path + "/state/sandboxed-run/staging/" + StagedGrantsCLITests.app
            let grants = (try? FileManager.default.contentsOfDirectory(atPath: app)) ?? []
            return grants.map { app + "/" + $0 + "/current/tree" }.first { FileManager.default.fileExists(atPath: $0) }
        }

        /// The app's container, as the command's $HOME.
        var container: String {
            ((try? cli(["container", "path", "--app", StagedGrantsCLITests.app]).stdout) ?? "").trimmingCharacters(in: .newlines)
        }
    }

    /// Every name beneath `root`, with its type and mode, size and bytes;
    /// `exactly`: its inode, link count and times too ("untouched" means all are equal).
    static func tree(_ root: String, exactly: Bool = true, skipping: Set<String> = []) -> [String] {
        var lines: [String] = []
        func visit(_ relative: String) {
            let path = relative.isEmpty ? root : root + "/" + relative
            var status = stat()
            guard lstat(path, &status) == 0 else { lines.append("\(relative): missing"); return }
            var line = "\(relative): mode \(String(status.st_mode, radix: 8)) size \(status.st_mode & S_IFMT == S_IFDIR ? 0 : status.st_size)"
            if exactly {
                line += " links \(status.st_nlink) inode \(status.st_ino) mtime \(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec)"
                    + " ctime \(status.st_ctim.tv_sec).\(status.st_ctim.tv_nsec)"
            }
            if status.st_mode & S_IFMT == S_IFREG { line += " bytes " + ((FileManager.default.contents(atPath: path)?.base64EncodedString()) ?? "?") }
            lines.append(line)
            if status.st_mode & S_IFMT == S_IFDIR {
                for name in ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() where !skipping.contains(name) {
                    visit(relative.isEmpty ? name : relative + "/" + name)
                }
            }
        }
        visit("")
        return lines
    }

    /// The regular files beneath `root` and their bytes (folders left empty by `patch` do not count).
    static func files(_ root: String) -> [String: Data] {
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            var status = stat()
            if lstat(root + "/" + relative, &status) == 0, status.st_mode & S_IFMT == S_IFREG {
                files[relative] = FileManager.default.contents(atPath: root + "/" + relative)
            }
        }
        return files
    }

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    /// A hostile writer: appends, a folder renamed with mv and with
    /// rename(2), `rm -r d; mkdir d`, a tree removed, chmod, truncation to
    /// nothing and to a part, a delete; then it reads everything back.
    static let hostile = """
        set -e
        echo more >> a.txt
        echo new > new.txt
        mv d d2
        python3 -c 'import os; os.rename("p", "x/p")'
        rm -r e; mkdir e; echo again > e/h
        rm -r big
        chmod 600 m
        : > t.txt
        python3 -c 'import os; os.truncate("t2.txt", 7)'
        rm del.txt
        cat a.txt new.txt d2/f x/p/q e/h t2.txt; echo
        stat -c '%n %a %s' m t.txt t2.txt
        ls | tr '\\n' ' '; echo
        ls x e | tr '\\n' ' '; echo
        for gone in d p big del.txt e/g; do test -e "$gone" && echo "still $gone" || true; done
        exit 5
        """

    static let hostileOutput = """
        alpha
        more
        new
        eff
        queue
        again
        shorten
        m 600 5
        t.txt 644 0
        t2.txt 644 7
        a.txt d2 e m new.txt t.txt t2.txt x 
        e: h  x: keep p 

        """

    /// Every change of `hostile`, as `Vault.changeLines` gives them.
    static let hostileChanges = [
        "added e/h", "added new.txt",
        "deleted big", "deleted big/one", "deleted big/sub", "deleted big/sub/two", "deleted del.txt", "deleted e/g",
        "mode-changed m", "modified a.txt", "modified t.txt", "modified t2.txt",
        "renamed d2 from d", "renamed d2/f from d/f", "renamed x/p from p", "renamed x/p/q from p/q",
    ]

    // MARK: run --review

    @Test(arguments: users)
    func theCommandSeesItsOwnChangesAndTheFolderIsUntouched(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        let before = Self.tree(vault.folder)
        let result = try vault.run(Self.hostile)
        #expect(result.status == 5, "the command's status: \(result)")
        #expect(result.stdout == Self.hostileOutput, "\(result)")
        #expect(Self.tree(vault.folder) == before, "the folder changed")
        // Without a terminal: the list, and how to review it.
        #expect(result.stderr.contains("staged in grant V (\(vault.folder)), not applied:"), "\(result.stderr)")
        #expect(result.stderr.contains("  deleted     \(vault.folder)/big/sub/two"), "\(result.stderr)")
        #expect(result.stderr.contains("16 changes are staged: review with `sandboxed-run review list --app \(Self.app)`"), "\(result.stderr)")
        // The clone holds them.
        let clone = try #require(vault.clone)
        #expect(Self.read(clone + "/a.txt") == "alpha\nmore\n" && Self.read(clone + "/x/p/q") == "queue\n")
    }

    @Test func aRunThatChangesNothingLeavesNothingStaged() throws {
        let vault = try Vault()
        let result = try vault.run("cat a.txt; ls >/dev/null")
        #expect(result.status == 0 && result.stdout == "alpha\n", "\(result)")
        #expect(result.stderr.contains("--review: the command changed nothing in its staged grants"), "\(result.stderr)")
        let listed = try vault.review(["list"])
        #expect(listed.status == 0 && listed.stdout == "app \(Self.app) has no staged changes\n", "\(listed)")
    }

    /// A tree too deep to list: the run still ends with the command's
    /// status, says why nothing can be listed, and the tree can be rejected.
    @Test func aTreeTooDeepToListKeepsTheCommandsStatusAndCanBeRejected() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        let before = Self.tree(vault.folder)
        let result = try vault.run("python3 -c 'import os\nfor _ in range(300): os.mkdir(\"d\"); os.chdir(\"d\")'; exit 6")
        #expect(result.status == 6, "\(result)")
        #expect(result.stderr.contains("is nested more than 256 folders deep") && result.stderr.contains("the changes stay staged"), "\(result.stderr)")
        #expect(Self.tree(vault.folder) == before)
        let listed = try vault.review(["list"])
        #expect(listed.status == 125 && listed.stderr.contains("is nested more than 256 folders deep"), "\(listed)")
        let rejected = try vault.review(["reject"])
        #expect(rejected.status == 0, "\(rejected)")
        #expect(try vault.changes().isEmpty && vault.clone == nil && Self.tree(vault.folder) == before)
    }

    // MARK: review list

    @Test(arguments: users)
    func listNamesEveryChangeAndJSONGivesHostPaths(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        #expect(try vault.run(Self.hostile).status == 5)
        #expect(try vault.changeLines() == Self.hostileChanges)
        for change in try vault.changes() {
            let path = try #require(change["path"] as? String)
            #expect(path.hasPrefix(vault.folder + "/"), "a host path: \(path)")
        }
        let listed = try vault.review(["list"])
        #expect(listed.status == 0, "\(listed)")
        let folder = vault.folder
        #expect(listed.stdout.hasPrefix("grant V ("), "\(listed)")
        #expect(listed.stdout.contains(") \(folder): 16 changes\n"), "\(listed.stdout)")
        for line in [
            "  modified    \(folder)/a.txt\n", "  added       \(folder)/new.txt\n",
            "  renamed     \(folder)/d2  (from \(folder)/d)  (folder)\n", "  renamed     \(folder)/x/p/q  (from \(folder)/p/q)\n",
            "  mode-changed \(folder)/m  (mode 644 -> 600)\n", "  deleted     \(folder)/big  (folder)\n",
        ] {
            #expect(listed.stdout.contains(line), "\(line) in \(listed.stdout)")
        }
        // Deletions are each named, never summarised.
        #expect(listed.stdout.components(separatedBy: "\n  deleted     ").count - 1 == 6, "\(listed.stdout)")
    }

    // MARK: review diff

    @Test(arguments: users)
    func theDiffAppliesWithGitApplyAndPatch(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        let original = vault.home.path + "/original"
        #expect(try CLI.program("/bin/cp", ["-a", vault.folder, original]).status == 0)
        #expect(try vault.run(Self.hostile).status == 5)
        let diff = try vault.review(["diff"])
        #expect(diff.status == 0 && diff.stdout.contains("diff --git a/a.txt b/a.txt\n"), "\(diff)")
        let patch = vault.home.path + "/staged.patch"
        try diff.stdout.write(toFile: patch, atomically: false, encoding: .utf8)
        let clone = try #require(vault.clone)
        let staged = Self.files(clone)
        for (tool, command) in [("git", "git apply \"$2\""), ("patch", "patch -s -p1 < \"$2\"")] {
            let copy = vault.home.path + "/" + tool
            #expect(try CLI.program("/bin/cp", ["-a", original, copy]).status == 0)
            let applied = try CLI.program("/bin/sh", ["-c", "cd \"$1\" && " + command, "sh", copy, patch])
            #expect(applied.status == 0, "\(tool): \(applied)")
            #expect(Self.files(copy) == staged, "\(tool) did not give the staged tree's files")
        }
        // By host path: only what it names.
        let one = try vault.review(["diff", vault.folder + "/new.txt"])
        #expect(one.status == 0 && one.stdout == "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n", "\(one)")
    }

    @Test func aBinaryFileIsOneSummaryLine() throws {
        let vault = try Vault(files: [("b.dat", "bin\u{0}ary")])
        #expect(try vault.run("printf 'more\\0' >> b.dat").status == 0)
        let diff = try vault.review(["diff"])
        #expect(diff.status == 0 && diff.stdout.hasPrefix("Binary files a/b.dat and b/b.dat differ (7 ") && diff.stdout.hasSuffix(" 12 bytes)\n"), "\(diff)")
    }

    // MARK: review accept and reject

    @Test(arguments: users)
    func acceptingAllMakesTheFolderTheStagedTree(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        #expect(try vault.run(Self.hostile).status == 5)
        let staged = Self.tree(try #require(vault.clone), exactly: false)
        let accepted = try vault.review(["accept"])
        #expect(accepted.status == 0, "\(accepted)")
        #expect(accepted.stdout.split(separator: "\n").count == 16 && accepted.stdout.split(separator: "\n").allSatisfy { $0.hasPrefix("applied   \(vault.folder)/") }, "\(accepted.stdout)")
        #expect(Self.tree(vault.folder, exactly: false) == staged)
        let listed = try vault.review(["list"])
        #expect(listed.status == 0 && listed.stdout == "app \(Self.app) has no staged changes\n", "\(listed)")
        #expect(try vault.changes().isEmpty)
        #expect(vault.clone == nil, "the clone is gone")
        // Owned by the person, never by whoever ran the review for them.
        var status = stat()
        #expect(lstat(vault.folder + "/new.txt", &status) == 0 && status.st_uid == (user ?? 0))
    }

    @Test(arguments: users)
    func acceptingByHostPathOrRelativePathAppliesOnlyThose(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        #expect(try vault.run(Self.hostile).status == 5)
        let one = try vault.review(["accept", vault.folder + "/a.txt"])
        #expect(one.status == 0 && one.stdout == "applied   \(vault.folder)/a.txt\n", "\(one)")
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\nmore\n")
        #expect(Self.read(vault.folder + "/t.txt") == "truncate me\n" && Self.read(vault.folder + "/del.txt") == "delete me\n")
        // Relative to the working directory; a folder selects everything below it.
        let relative = try vault.review(["accept", "new.txt", "./big"], in: vault.folder)
        #expect(relative.status == 0, "\(relative)")
        #expect(relative.stdout.split(separator: "\n").sorted() == [
            "applied   \(vault.folder)/big", "applied   \(vault.folder)/big/one", "applied   \(vault.folder)/big/sub",
            "applied   \(vault.folder)/big/sub/two", "applied   \(vault.folder)/new.txt",
        ], "\(relative.stdout)")
        #expect(Self.read(vault.folder + "/new.txt") == "new\n" && !FileManager.default.fileExists(atPath: vault.folder + "/big"))
        let rest = try vault.changeLines()
        #expect(rest == Self.hostileChanges.filter { !$0.hasSuffix(" a.txt") && !$0.hasSuffix(" new.txt") && !$0.contains(" big") }, "\(rest)")
        // A path in no staged grant is refused by name.
        let outside = try vault.review(["accept", vault.home.path + "/elsewhere"])
        #expect(outside.status == 125 && outside.stderr.contains("\(vault.home.path)/elsewhere is in no staged grant of \(Self.app)"), "\(outside)")
    }

    @Test(arguments: users)
    func rejectingLeavesTheFolderUntouchedAndEmptiesTheStaging(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        let before = Self.tree(vault.folder)
        #expect(try vault.run(Self.hostile).status == 5)
        // One path first, then the rest.
        let one = try vault.review(["reject", vault.folder + "/new.txt"])
        #expect(one.status == 0 && one.stdout == "rejected  \(vault.folder)/new.txt\n", "\(one)")
        #expect(try vault.changeLines() == Self.hostileChanges.filter { $0 != "added new.txt" })
        let rejected = try vault.review(["reject"])
        #expect(rejected.status == 0 && rejected.stdout.split(separator: "\n").count == 15, "\(rejected)")
        #expect(Self.tree(vault.folder) == before, "the folder changed")
        #expect(try vault.changes().isEmpty && vault.clone == nil)
        // A later run starts from the folder again.
        let again = try vault.run("cat a.txt; ls | tr '\\n' ' '")
        #expect(again.stdout == "alpha\na.txt big d del.txt e m p t.txt t2.txt x ", "\(again)")
    }

    // MARK: Conflicts

    @Test(arguments: users)
    func aFileChangedOutsideKeepsItsVersionAndTheStagedBytesBecomeAConflictVersion(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        #expect(try vault.run(Self.hostile).status == 5)
        // The person (or a sync daemon) writes after the run.
        let outside = try FileHandle(forWritingTo: URL(fileURLWithPath: vault.folder + "/a.txt"))
        try outside.seekToEnd()
        try outside.write(contentsOf: Data("outside\n".utf8))
        try outside.close()
        let listed = try vault.review(["list"])
        #expect(listed.stdout.contains("  modified    \(vault.folder)/a.txt  ! changed outside since staged\n"), "\(listed)")
        let json = try vault.changes().first { $0["path"] as? String == vault.folder + "/a.txt" }
        #expect(json?["changedOutside"] as? Bool == true)

        let accepted = try vault.review(["accept"])
        #expect(accepted.status == 3, "\(accepted)")
        let line = accepted.stdout.split(separator: "\n").first { $0.contains("/a.txt") } ?? ""
        #expect(line.hasPrefix("conflict  \(vault.folder)/a.txt: changed outside since staged; the folder's version stays"), "\(accepted.stdout)")
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\noutside\n", "the host's version stays")
        // Every other change applied.
        #expect(accepted.stdout.split(separator: "\n").filter { $0.hasPrefix("applied   ") }.count == 15, "\(accepted.stdout)")
        #expect(Self.read(vault.folder + "/new.txt") == "new\n")
        // The staged bytes: a conflict version of the file.
        let versions = try vault.cli(["versions", "list", vault.folder + "/a.txt"])
        #expect(versions.status == 0, "\(versions)")
        let identifier = String(versions.stdout.split(separator: "\t").first ?? "")
        #expect(versions.stdout.split(separator: "\n").count == 1 && !identifier.isEmpty, "\(versions.stdout)")
        let shown = try vault.cli(["versions", "show", vault.folder + "/a.txt", identifier])
        #expect(shown.status == 0 && shown.stdout == "alpha\nmore\n", "\(shown)")
        #expect(try vault.changes().isEmpty)
    }

    // MARK: A grant that no longer leads to its folder

    enum Loss: String, CaseIterable { case revoked, moved, replaced }

    @Test(arguments: Loss.allCases)
    func aGrantNoLongerFreshAppliesNothingSaysWhyAndKeepsTheChanges(loss: Loss) throws {
        let vault = try Vault()
        #expect(try vault.run(Self.hostile).status == 5)
        var folder = vault.folder
        switch loss {
        case .revoked:
            let list = try vault.cli(["grants", "list", "--app", Self.app, "--json"])
            let grants = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            let id = try #require(grants.first?["id"] as? String)
            #expect(try vault.cli(["grants", "revoke", "--grant", id]).status == 0)
        case .moved:
            folder = vault.home.path + "/Moved"
            #expect(rename(vault.folder, folder) == 0)
        case .replaced:
            // (Renamed away instead, the folder would be found by its handle: moved.)
            #expect(try CLI.program("/bin/rm", ["-r", vault.folder]).status == 0 && mkdir(vault.folder, 0o755) == 0)
            try "other\n".write(toFile: vault.folder + "/a.txt", atomically: false, encoding: .utf8)
        }
        let before = Self.tree(folder)
        for words in [["accept"], ["accept", vault.folder + "/a.txt"]] {
            let accepted = try vault.review(words)
            #expect(accepted.status == 125 && accepted.stdout.isEmpty, "\(words): \(accepted)")
            #expect(accepted.stderr.hasPrefix("sandboxed-run: grant V (") && accepted.stderr.contains(") is \(loss.rawValue) ("), "\(accepted.stderr)")
            #expect(accepted.stderr.contains("nothing was applied. The staged changes are kept: "), "\(accepted.stderr)")
            // What can be done: only a followed move keeps the grant (a new pick is another).
            #expect(accepted.stderr.hasSuffix(loss == .moved
                ? "run the app once more with --review --on-stale follow to reconnect this grant to its folder, then accept them; or reject them\n"
                : "they can never be applied (a folder picked again is another grant): reject them\n"), "\(accepted.stderr)")
        }
        #expect(Self.tree(folder) == before, "something was applied")
        if loss == .revoked {
            // Picked again: another grant, which starts from the folder.
            #expect(try vault.cli(["pick", "--app", Self.app, "--select", vault.folder, "-o", vault.bookmark]).status == 0)
            let again = try vault.run("cat a.txt; test -e big && echo big")
            #expect(again.status == 0 && again.stdout == "alpha\nbig\n", "\(again)")
        }
        let listed = try vault.review(["list"])
        #expect(listed.status == 0 && listed.stdout.contains("  the grant is \(loss.rawValue) now ("), "\(listed)")
        #expect(listed.stdout.contains("accepting applies nothing\n"), "\(listed)")
        // Without the folder to compare with, a chmod is listed as modified.
        #expect(try vault.changeLines() == Self.hostileChanges.map { $0 == "mode-changed m" ? "modified m" : $0 }.sorted())
        // A diff cannot be made against a folder it may not read: said, never a diff against nothing.
        let diff = try vault.review(["diff"])
        #expect(diff.status == 125 && diff.stdout.isEmpty && diff.stderr.contains("is \(loss.rawValue) ("), "\(diff)")
        // They can still be thrown away.
        let rejected = try vault.review(["reject"])
        #expect(rejected.status == 0 && rejected.stdout.split(separator: "\n").count == 16, "\(rejected)")
        #expect(Self.tree(folder) == before)
        #expect(try vault.changes().isEmpty)
    }

    /// A folder moved, and its bookmark followed to the new place by a later
    /// staged run: the staged changes (of the same grant) apply there.
    @Test func aMovedFolderFollowedByALaterRunAcceptsThere() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        #expect(try vault.run("echo one >> a.txt").status == 0)
        let moved = vault.home.path + "/Moved"
        #expect(rename(vault.folder, moved) == 0)
        let followed = try vault.run("cat a.txt; echo two >> a.txt", ["--review", "--on-stale", "follow"])
        #expect(followed.status == 0 && followed.stdout == "alpha\none\n", "\(followed)")
        #expect(followed.stderr.contains("staged in grant V (\(moved)), not applied:"), "\(followed.stderr)")
        let listed = try vault.review(["list"])
        #expect(listed.status == 0 && !listed.stdout.contains("now ("), "\(listed)")
        #expect(listed.stdout.contains("  modified    \(moved)/a.txt\n"), "\(listed)")
        let accepted = try vault.review(["accept"])
        #expect(accepted.status == 0 && accepted.stdout == "applied   \(moved)/a.txt\n", "\(accepted)")
        #expect(Self.read(moved + "/a.txt") == "alpha\none\ntwo\n")
    }

    // MARK: Later runs, and two at once

    @Test(arguments: users)
    func aLaterRunBuildsOnTheStagedChanges(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        #expect(try vault.run("echo one >> a.txt; echo first > n1; rm del.txt").status == 0)
        let second = try vault.run("cat a.txt n1; test -e del.txt || echo no-del; echo two >> a.txt; echo second > n2")
        #expect(second.status == 0 && second.stdout == "alpha\none\nfirst\nno-del\n", "\(second)")
        #expect(try vault.changeLines() == ["added n1", "added n2", "deleted del.txt", "modified a.txt"])
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\n")
        #expect(try vault.review(["accept"]).status == 0)
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\none\ntwo\n" && Self.read(vault.folder + "/n2") == "second\n")
    }

    @Test func aSecondStagedRunOfTheSameGrantIsRefusedWhileTheFirstRuns() throws {
        let vault = try Vault()
        let ready = vault.container + "/ready"
        let (first, out, err) = try vault.start(vault.runArguments("echo first >> a.txt; touch \"$HOME/ready\"; exec sleep 30"))
        defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
        CLI.waitUntilReady(ready, first)
        #expect(FileManager.default.fileExists(atPath: ready), "the first run did not start")
        let second = try vault.run("touch \"$HOME/second-ran\"")
        #expect(second.status == 125, "\(second)")
        #expect(second.stderr.contains("are in use by another sandbox or review: wait for it to end, then try again"), "\(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: vault.container + "/second-ran"), "the second command ran")
        // Nor is a review let in meanwhile.
        let accepted = try vault.review(["accept"])
        #expect(accepted.status == 125 && accepted.stderr.contains("in use by another sandbox or review"), "\(accepted)")
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\n")
        kill(first.processIdentifier, SIGTERM)
        _ = try readOutputs(out, err)
        first.waitUntilExit()
        #expect(try vault.changeLines() == ["modified a.txt"])
    }

    // MARK: A killed launcher

    @Test(arguments: users)
    func aKilledLaunchersStagedChangesSurvive(as user: uid_t?) throws {
        let vault = try Vault(as: user)
        let before = Self.tree(vault.folder)
        let ready = vault.container + "/ready"
        let (process, out, err) = try vault.start(vault.runArguments("echo more >> a.txt; rm -r big; echo new > new.txt; touch \"$HOME/ready\"; exec sleep 30"))
        CLI.waitUntilReady(ready, process)
        #expect(FileManager.default.fileExists(atPath: ready), "the command did not start")
        kill(process.processIdentifier, SIGKILL)
        _ = try readOutputs(out, err)
        process.waitUntilExit()
        // The lock goes with the launcher and its sandbox (which its death ends).
        var listed = try vault.review(["list"])
        for _ in 0..<100 where listed.status != 0 {
            Thread.sleep(forTimeInterval: 0.05)
            listed = try vault.review(["list"])
        }
        #expect(listed.status == 0, "\(listed)")
        #expect(try vault.changeLines() == ["added new.txt", "deleted big", "deleted big/one", "deleted big/sub", "deleted big/sub/two", "modified a.txt"])
        #expect(Self.tree(vault.folder) == before, "the folder changed")
        #expect(try vault.review(["accept"]).status == 0)
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\nmore\n")
    }

    // MARK: Hostile names

    @Test func namesAreEscapedInTextAndExactInJSON() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        let make = #"import os; [open(n, "wb").write(b"x\n") for n in (b"esc\x1b[31mred", b"new\nline", b"bad\xff\xfe", b"bell\x07", b"tab\there", b"back\\slash")]"#
        let run = try vault.run("python3 -c '\(make)'")
        #expect(run.status == 0, "\(run)")
        let folder = vault.folder
        let escaped = [#"esc\x1b[31mred"#, #"new\nline"#, #"bad\xff\xfe"#, #"bell\x07"#, #"tab\there"#, #"back\\slash"#]
        for (what, output) in [("run's list", run.stderr), ("review list", try vault.review(["list"]).stdout)] {
            #expect(!output.utf8.contains(0x1B) && !output.utf8.contains(0x07) && !output.utf8.contains(0x09), "\(what): \(output.debugDescription)")
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            // A raw newline in a name would start a line of its own.
            #expect(lines.dropLast().allSatisfy { $0.hasPrefix("  ") || $0.hasPrefix("grant ") || $0.hasPrefix("staged in grant ") || $0.hasPrefix("sandboxed-run: ") },
                    "\(what): \(output.debugDescription)")
            for name in escaped {
                #expect(lines.contains { $0.hasPrefix("  added       ") && $0.hasSuffix("\(folder)/\(name)") }, "\(what): \(name) in \(output.debugDescription)")
            }
        }
        let changes = try vault.changes()
        #expect(changes.count == 6)
        let paths = changes.compactMap { $0["path"] as? String }.sorted()
        #expect(paths == ["back\\slash", "bell\u{07}", "esc\u{1B}[31mred", "new\nline", "tab\there"].map { folder + "/" + $0 }, "\(paths)")
        let raw = changes.compactMap { $0["path"] as? [String: Any] }
        #expect(raw.count == 1 && raw.first?["hex"] as? String == (folder + "/bad").utf8.map { String(format: "%02x", $0) }.joined() + "fffe", "\(raw)")
        // Accepted, each is made with exactly its bytes, and named escaped.
        let accepted = try vault.review(["accept"])
        #expect(accepted.status == 0 && !accepted.stdout.utf8.contains(0x1B) && accepted.stdout.contains(#"/new\nline"#), "\(accepted)")
        let names = try CLI.program("/usr/bin/python3", ["-c", "import os, sys; print(sorted(os.listdir(sys.argv[1].encode())))", folder]).stdout
        #expect(names == #"[b'a.txt', b'back\\slash', b'bad\xff\xfe', b'bell\x07', b'esc\x1b[31mred', b'new\nline', b'tab\there']"# + "\n", "\(names)")
    }

    // MARK: The policy key, and what --review needs

    @Test func thePolicyKeyStagesWithoutTheOption() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        let policy = vault.home.path + "/review.json"
        for review in [true, false] {
            try """
                {"com.apple.security.files.user-selected.read-write": true, "org.sandboxed-run.files.review": \(review),
                 "org.sandboxed-run.system-paths.read-execute": ["/usr", "/bin", "/lib", "/lib64"]}
                """.write(toFile: policy, atomically: false, encoding: .utf8)
            let result = try vault.run("echo \(review) >> a.txt; cat a.txt", ["--policy", policy])
            #expect(result.status == 0 && result.stdout == "alpha\n\(review)\n", "\(result)")
            #expect(Self.read(vault.folder + "/a.txt") == (review ? "alpha\n" : "alpha\nfalse\n"))
            #expect(result.stderr.contains("1 change is staged") == review, "\(result.stderr)")
            #expect(try vault.changeLines() == (review ? ["modified a.txt"] : []))
            _ = try vault.review(["reject"])
        }
    }

    @Test func reviewInTheHostViewIsRefused() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        let result = try vault.run("echo x >> a.txt; touch \"$HOME/ran\"", ["--review", "--view", "host"])
        #expect(result.status == 125, "\(result)")
        #expect(result.stderr == "sandboxed-run: --review (or org.sandboxed-run.files.review) needs the private view: a staged folder is a clone shown in the folder's place, which the host view cannot do; drop --view host\n", "\(result.stderr)")
        #expect(Self.read(vault.folder + "/a.txt") == "alpha\n" && !FileManager.default.fileExists(atPath: vault.container + "/ran"))
    }

    /// The container is the app's own: never staged, its writes land at once.
    @Test func theContainerIsNeverStaged() throws {
        let vault = try Vault(files: [("a.txt", "alpha\n")])
        let result = try vault.run("echo kept > \"$HOME/Documents/c.txt\"; echo more >> a.txt")
        #expect(result.status == 0, "\(result)")
        #expect(Self.read(vault.container + "/Documents/c.txt") == "kept\n")
        #expect(try vault.changeLines() == ["modified a.txt"])
        #expect(!result.stderr.contains("c.txt"), "\(result.stderr)")
    }

    // MARK: On a terminal

    /// The end-of-run question on the launcher's terminal: `diff` shows the
    /// diff and asks again, `reject` rejects, `accept` accepts, Enter keeps
    /// them staged. An answer typed before the question is half a second on
    /// screen (perhaps as the command told the person to) is no answer.
    /// Unprivileged too: the launcher then shares the person's terminal with the relay.
    @Test(arguments: [("reject", nil), ("accept", nil), ("diff\naccept", nil), ("", nil), ("early", nil)]
        + (canBecomeNobody ? [("diff\naccept", 65534), ("reject", 65534)] : []) as [(String, uid_t?)])
    func theEndOfRunQuestion(answers: String, as user: uid_t?) throws {
        let vault = try Vault(as: user, files: [("a.txt", "alpha\n")])
        let terminal = try PersonAtTerminal()
        // setsid -c: the pty is the launcher's controlling terminal (/dev/tty), as in a login session.
        let launcher = (user == nil ? [] : Self.nobody) + [CLI.binary] + vault.runArguments("echo more >> a.txt; printf 'title\\033]0;owned\\007\\n' > b.txt; echo ran; printf '\\033[8m'; exit 4")
        let process = try Self.start(["/usr/bin/setsid", "--wait", "--ctty"] + launcher, on: terminal, home: vault.home)
        let question = "Apply these changes? Type accept, reject, diff, or keep (the default: they stay staged): "
        if answers == "early" {
            // Typed the moment the question shows: thrown away; then Enter, in time.
            #expect(terminal.waitFor(question, times: 1), "\(terminal.output)")
            terminal.type("accept\r")
            usleep(900_000)
            terminal.type("\r")
        } else {
            for (index, answer) in answers.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                #expect(terminal.waitFor(question, times: index + 1), "\(terminal.output)")
                usleep(700_000)  // keys count from half a second after the question
                terminal.type(answer + "\r")
            }
        }
        #expect(terminal.finish(process) == 4, "the command's status: \(terminal.output)")
        let shown = terminal.output
        #expect(shown.contains("ran") && shown.contains("  modified    \(vault.folder)/a.txt"), "\(shown)")
        // The command left the terminal concealing text: the launcher resets it before its list, and marks each line.
        let concealed = shown.range(of: "\u{1B}[8m", options: .backwards), reset = shown.range(of: "\u{18}\u{1B}\\", options: .backwards)
        #expect(concealed != nil && reset != nil && reset!.lowerBound > concealed!.lowerBound, "\(shown.debugDescription)")
        #expect(shown.contains(" sandboxed-run \u{1B}[0m   modified    \(vault.folder)/a.txt"), "\(shown.debugDescription)")
        switch answers {
        case "reject":
            #expect(shown.contains("rejected: the folder is as it was"), "\(shown)")
            #expect(try Self.read(vault.folder + "/a.txt") == "alpha\n" && vault.changes().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: vault.folder + "/b.txt"))
        case "accept", "diff\naccept":
            #expect(shown.contains("accepted: the changes are in the folder, on disk"), "\(shown)")
            #expect(try Self.read(vault.folder + "/a.txt") == "alpha\nmore\n" && vault.changes().isEmpty)
            #expect(shown.contains("--- a/a.txt\r\n+++ b/a.txt\r\n@@ -1 +1,2 @@\r\n alpha\r\n+more\r\n") == (answers == "diff\naccept"), "\(shown)")
            #expect(terminal.count(question) == (answers == "diff\naccept" ? 2 : 1))
            // The file's bytes are shown, never obeyed: no raw escape sequence from the diff.
            #expect(shown.contains("+title\\x1b]0;owned\\x07\r\n") == (answers == "diff\naccept"), "\(shown.debugDescription)")
            #expect(!shown.contains("\u{1B}]0;owned"), "\(shown.debugDescription)")
            #expect(Self.read(vault.folder + "/b.txt") == "title\u{1B}]0;owned\u{07}\n")
        default:
            #expect(shown.contains("kept staged: `sandboxed-run review list --app \(Self.app)` shows them again"), "\(shown)")
            #expect(Self.read(vault.folder + "/a.txt") == "alpha\n")
            #expect(try vault.changeLines() == ["added b.txt", "modified a.txt"])
        }
    }

    /// `arguments` (a program and its arguments) with `terminal` as stdin, stdout and stderr.
    static func start(_ arguments: [String], on terminal: PersonAtTerminal, home: CLI.Home) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.environment = home.environment.merging(["TERM": "xterm"]) { $1 }
        process.currentDirectoryURL = URL(fileURLWithPath: home.path)
        let handle = FileHandle(fileDescriptor: terminal.terminal, closeOnDealloc: false)
        process.standardInput = handle
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }
}
