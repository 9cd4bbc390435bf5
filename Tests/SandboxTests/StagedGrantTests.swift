import Foundation
import Testing
import SystemPackage
import CLaunch
@testable import Sandbox

/// A staged grant (`PathRule.staged`, issue #32): the command finds the
/// grant's clone at the grant's path, works on it as on the folder, and the
/// folder itself stays untouched. The clone lies in the broker's state (a
/// protected folder), which the sandbox otherwise never reaches.
@Suite struct StagedGrantTests {
    /// A granted folder WORK, its clone in a protected state folder (as the
    /// broker makes it: `STATE/staging/APP/GRANT/tree`), and the rule.
    final class Staged {
        let scratch = Scratch()
        var state: String { scratch.path + "/state" }
        let folder: String
        let clone: String

        /// `folder`: where the granted folder lies, beneath the scratch folder.
        init(folder name: String = "work") throws {
            folder = scratch.path + "/" + name
            clone = scratch.path + "/state/staging/com.example.tests/G1/tree"
            try FileManager.default.createDirectory(atPath: folder + "/d", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: folder + "/e", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: folder + "/p", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: folder + "/x", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: state + "/staging/com.example.tests/G1", withIntermediateDirectories: true)
            for (name, contents) in [("a.txt", "alpha\n"), ("m", "mode\n"), ("d/f", "eff\n"), ("e/g", "gee\n"), ("p/q", "queue\n")] {
                try contents.write(toFile: folder + "/" + name, atomically: false, encoding: .utf8)
            }
            chmod(folder + "/m", 0o644)
            let copy = try Run.unconfined(["/bin/cp", "-a", folder, clone])
            #expect(copy.termination == .exited(0), "\(copy.stderr)")
        }

        func rule(access: Policy.PathAccess = .readWrite, name: String = "WORK") throws -> PathRule {
            PathRule(grant: name, path: FilePath(folder), descriptor: try ConfinementPlan.openFolder(folder), access: access,
                     stagedIn: try ConfinementPlan.openFolder(clone))
        }

        /// The request as the broker gives it: the state and the containers protected, the grant's variable set.
        func configure(_ request: inout LaunchRequest, rule: PathRule) {
            request.protectedFolders = [state, scratch.containers]
            request.folders.append(rule)
            request.pathVariables["SANDBOX_GRANT_\(rule.grantName ?? "")"] = rule.path
        }

        func run(_ command: [String], rule: PathRule? = nil, configure more: (inout LaunchRequest) -> Void = { _ in }) throws -> Outcome {
            let rule = try rule ?? self.rule()
            return try Run.confined(command, in: scratch) { request in
                configure(&request, rule: rule)
                more(&request)
            }
        }
    }

    /// Every name beneath `root`, with its type and mode, link count, inode,
    /// size, times and bytes: "untouched" means all of these are equal.
    static func tree(_ root: String) -> [String] {
        var lines: [String] = []
        func visit(_ relative: String) {
            let path = relative.isEmpty ? root : root + "/" + relative
            var status = stat()
            guard lstat(path, &status) == 0 else { lines.append("\(relative): missing"); return }
            var line = "\(relative): mode \(String(status.st_mode, radix: 8)) links \(status.st_nlink) inode \(status.st_ino) size \(status.st_size)"
                + " mtime \(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec) ctime \(status.st_ctim.tv_sec).\(status.st_ctim.tv_nsec)"
            if status.st_mode & S_IFMT == S_IFREG { line += " bytes " + ((FileManager.default.contents(atPath: path)?.base64EncodedString()) ?? "?") }
            lines.append(line)
            if status.st_mode & S_IFMT == S_IFDIR {
                for name in ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() {
                    visit(relative.isEmpty ? name : relative + "/" + name)
                }
            }
        }
        visit("")
        return lines
    }

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    static func inode(_ path: String) -> ino_t? {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_ino : nil
    }

    /// Everything a command does to a folder: new and appended files, a
    /// folder renamed in place (mv) and into another folder (rename(2)),
    /// a folder removed and made again, chmod, a hard link into another
    /// folder, and reading it all back.
    static let edits = """
        set -e
        cd "$1"
        echo new > new.txt
        echo more >> a.txt
        mv d d2
        python3 -c 'import os; os.rename("p", "x/p")'
        rm -r e; mkdir e; echo again > e/h
        chmod 600 m
        ln a.txt x/a-link
        cat new.txt a.txt d2/f x/p/q e/h x/a-link
        stat -c '%a %h' m a.txt
        ls | tr '\\n' ' '
        """

    @Test(arguments: [nil, 65534] as [uid_t?]) func editsWorkAsInTheFolderAndLandInTheClone(uid: uid_t?) throws {
        if try AsUser.delegate("StagedGrantTests/editsWorkAsInTheFolderAndLandInTheClone", uid: uid) { return }
        let staged = try Staged()
        let before = Self.tree(staged.folder)
        let outcome = try staged.run(["/bin/sh", "-c", Self.edits, "sh", staged.folder])
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        #expect(outcome.output == [
            "new", "alpha", "more", "eff", "queue", "again", "alpha", "more", "600 1", "644 2", "a.txt d2 e m new.txt x ",
        ], "\(outcome.stderr)")
        // The folder: not one byte, name, mode or time changed.
        #expect(Self.tree(staged.folder) == before)
        // The clone: every change.
        let clone = staged.clone
        #expect(Self.read(clone + "/new.txt") == "new\n")
        #expect(Self.read(clone + "/a.txt") == "alpha\nmore\n")
        #expect(Self.read(clone + "/d2/f") == "eff\n" && Self.inode(clone + "/d") == nil)
        #expect(Self.read(clone + "/x/p/q") == "queue\n" && Self.inode(clone + "/p") == nil)
        #expect(Self.read(clone + "/e/h") == "again\n" && Self.inode(clone + "/e/g") == nil)
        #expect(Self.inode(clone + "/x/a-link") != nil && Self.inode(clone + "/x/a-link") == Self.inode(clone + "/a.txt"))
        var status = stat()
        #expect(lstat(clone + "/m", &status) == 0 && status.st_mode & 0o7777 == 0o600)
        AsUser.ran()
    }

    @Test(arguments: [nil, 65534] as [uid_t?]) func theStateTheClonesPlaceAndTheFolderAreOutOfReach(uid: uid_t?) throws {
        if try AsUser.delegate("StagedGrantTests/theStateTheClonesPlaceAndTheFolderAreOutOfReach", uid: uid) { return }
        let staged = try Staged()
        let before = Self.tree(staged.folder)
        let code = Attack.prelude + """
            grant, state, clone = sys.argv[1:4]
            print("grant", os.stat(grant).st_ino)
            attempt("list state", lambda: os.listdir(state))
            attempt("read clone", lambda: open(clone + "/a.txt").read())
            attempt("write beside clone", lambda: open(os.path.dirname(clone) + "/planted", "w"))
            attempt("write beside grant", lambda: open(os.path.dirname(grant) + "/planted", "w"))
            attempt("rename grant", lambda: os.rename(grant, grant + "-moved"))
            """
        let outcome = try staged.run([Run.python, "-c", code, staged.folder, staged.state, staged.clone])
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        // At the grant's path: the clone's inode, not the folder's.
        #expect(outcome.output == [
            "grant \(Self.inode(staged.clone) ?? 0)", "list state ENOENT", "read clone ENOENT", "write beside clone ENOENT",
            "write beside grant EROFS", "rename grant EROFS",
        ], "\(outcome.stderr)")
        #expect(Self.tree(staged.folder) == before)
        #expect(Self.inode(staged.scratch.path + "/planted") == nil && Self.inode(staged.clone + "/../planted") == nil)
        AsUser.ran()
    }

    @Test func theRulesBindToTheCloneNeverToTheFolder() throws {
        let staged = try Staged()
        let rule = try staged.rule()
        var request = LaunchRequest(
            app: try AppID("com.example.tests"), policy: .defaultPolicy, command: ["/bin/true"], containerBase: staged.scratch.containers,
            protectedFolders: [], hostEnvironment: [:])
        staged.configure(&request, rule: rule)
        let plan = try ConfinementPlan(request)
        let folder = try rule.descriptor.status().inodeIdentity
        let clone = try #require(rule.staged).status().inodeIdentity
        let writable = Set(plan.writableRoots.compactMap { try? $0.status().inodeIdentity })
        let readable = Set(plan.readableRoots.compactMap { try? $0.status().inodeIdentity })
        #expect(writable.contains(clone) && readable.contains(clone))
        #expect(!writable.contains(folder) && !readable.contains(folder))
        let layers = try #require(plan.reparenting)
        #expect(layers.folders.contains { $0.identity == clone } && !layers.folders.contains { $0.identity == folder })
        // The bind: the folder's place, the clone's bytes.
        let view = try #require(plan.viewPlan)
        let bind = try #require(view.steps.first { $0.kind == CSB_VIEW_BIND && $0.target == Array(staged.folder.utf8.dropFirst()) })
        #expect(bind.source == Array(staged.clone.utf8) && bind.identity == clone && bind.targetIdentity == folder)
        #expect(bind.flags & UInt32(CSB_VIEW_WRITABLE.rawValue) != 0 && bind.flags & UInt32(CSB_VIEW_REVOCABLE.rawValue) != 0)
        #expect(plan.revocableLaunchGrants == ["WORK"])
        #expect(rule.shownName == "grant WORK (staged)")
    }

    /// `--explain` finds the rule by the clone, which the command reaches, and says the grant is staged.
    @Test func aDeniedWriteIsExplainedAsInTheStagedGrant() throws {
        let staged = try Staged()
        let explained = staged.scratch.path + "/.explained"
        let fd = open(explained, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        defer { close(fd) }
        let outcome = try staged.run(["/bin/sh", "-c", "echo new >> \"$1/a.txt\"", "sh", staged.folder], rule: try staged.rule(access: .readOnly)) {
            $0.explainDenials = fd
        }
        #expect(outcome.termination != .exited(0))
        #expect(Self.read(explained)?.contains(
            "write denied: \(staged.folder)/a.txt: is in grant WORK (staged), which is read-only; grant it read-write to allow this") == true,
            "\(Self.read(explained) ?? "")")
        #expect(Self.read(staged.clone + "/a.txt") == "alpha\n" && Self.read(staged.folder + "/a.txt") == "alpha\n")
    }

    /// The grant named through a link: the view makes the link, and checks
    /// that following it leads to what it shows there, the clone.
    @Test func aStagedGrantNamedThroughALink() throws {
        let staged = try Staged()
        let alias = staged.scratch.path + "/alias"
        #expect(symlink("work", alias) == 0)
        let rule = PathRule(grant: "WORK", path: FilePath(alias), descriptor: try ConfinementPlan.openFolder(alias), access: .readWrite,
                            stagedIn: try ConfinementPlan.openFolder(staged.clone))
        let before = Self.tree(staged.folder)
        let outcome = try staged.run(["/bin/sh", "-c", "echo new > \"$1/new.txt\" && cat \"$1/new.txt\"", "sh", alias], rule: rule)
        #expect(outcome.termination == .exited(0) && outcome.output == ["new"], "\(outcome.stderr)")
        #expect(Self.read(staged.clone + "/new.txt") == "new\n" && Self.tree(staged.folder) == before)
    }

    /// A denials log the command could reach through the clone would be its to rewrite.
    @Test func aDenialsLogInTheCloneIsRefused() throws {
        let staged = try Staged()
        let fd = open(staged.clone + "/denials.jsonl", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        let log = OwnedDescriptor(taking: fd)
        #expect {
            try staged.run(["/bin/true"]) { $0.denialLog = log }
        } throws: { error in
            guard case .denialLog(_, let problem) = error as? SandboxError else { return false }
            return problem.contains("grant WORK (staged)")
        }
    }

    @Test func theHostViewIsRefused() throws {
        let staged = try Staged()
        for compatibility in [CompatibilityLevel.hardRequirement, .bestEffort] {
            #expect {
                try staged.run(["/bin/sh", "-c", "echo ran > \"$1/ran\"", "sh", staged.folder]) { request in
                    request.view = .host
                    request.compatibility = compatibility
                }
            } throws: { error in
                guard case .usage(let message) = error as? SandboxError else { return false }
                return message.contains("grant WORK (staged)") && message.contains("--view private")
            }
        }
        #expect(Self.inode(staged.folder + "/ran") == nil && Self.inode(staged.clone + "/ran") == nil)
    }

    /// `--best-effort` runs in the host view where the private one cannot
    /// be had; never with a staged grant, whose folder the command would find.
    @Test func bestEffortDoesNotFallBackToTheHostViewWhenPlanning() throws {
        let staged = try Staged()
        #expect {
            try staged.run(["/bin/sh", "-c", "echo ran > \"$HOME/ran\""]) { request in
                request.compatibility = .bestEffort
                request.privateNamespaces = false  // no private view to be had
            }
        } throws: { error in
            guard case .viewUnavailable(let reason) = error as? SandboxError else { return false }
            return reason.contains("staged grant")
        }
    }

    @Test func bestEffortDoesNotFallBackToTheHostViewWhenTheViewFails() throws {
        let staged = try Staged()
        var request = LaunchRequest(
            app: try AppID("com.example.tests"), policy: .defaultPolicy, command: ["/bin/sh", "-c", "echo ran > \"$HOME/ran\""],
            containerBase: staged.scratch.containers, protectedFolders: [], hostEnvironment: [:])
        staged.configure(&request, rule: try staged.rule())
        request.compatibility = .bestEffort
        let plan = try ConfinementPlan(request)
        #expect(plan.plannedView == .private)
        // The clone replaced after planning: the keeper's bind finds another folder and the view fails.
        #expect(rename(staged.clone, staged.clone + "-old") == 0 && mkdir(staged.clone, 0o755) == 0)
        #expect {
            _ = try plan.launch().wait()
        } throws: { error in
            guard case .viewUnavailable(let reason) = error as? SandboxError else { return false }
            return reason.contains("staged grant")
        }
        #expect(Self.inode(plan.container.root + "/ran") == nil)
    }

    @Test func aRevocationTakesTheCloneAway() throws {
        let staged = try Staged()
        var request = LaunchRequest(
            app: try AppID("com.example.tests"), policy: .defaultPolicy,
            command: ["/bin/sh", "-c", "cat \"$1/a.txt\"; : > \"$HOME/ready\"; while [ ! -e \"$HOME/go\" ]; do sleep 0.02; done; cat \"$1/a.txt\"",
                      "sh", staged.folder],
            containerBase: staged.scratch.containers, protectedFolders: [], hostEnvironment: [:])
        staged.configure(&request, rule: try staged.rule())
        let out = staged.scratch.path + "/.out", err = staged.scratch.path + "/.err"
        let outFD = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600), errFD = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let nullFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(outFD); close(errFD); close(nullFD) }
        (request.standardInput, request.standardOutput, request.standardError) = (nullFD, outFD, errFD)
        let plan = try ConfinementPlan(request)
        let process = try plan.launch()
        let deadline = Date().addingTimeInterval(20)
        while Self.inode(plan.container.root + "/ready") == nil, Date() < deadline { usleep(10_000) }
        #expect(try process.running?.detachLaunchGrants(["WORK"]) == ["WORK"])
        _ = FileManager.default.createFile(atPath: plan.container.root + "/go", contents: nil)
        #expect(try process.wait() != .exited(0))
        #expect(Self.read(out) == "alpha\n")
        #expect(Self.read(err)?.contains("No such file or directory") == true, "\(Self.read(err) ?? "")")
    }

    // MARK: The protected folders' one exception

    @Test func aGrantInsideTheStateIsStillRefusedUnlessItsTheCloneOfAStagedOne() throws {
        let staged = try Staged()
        // The clone itself, granted as an ordinary folder.
        let plain = PathRule(grant: "CLONE", path: FilePath(staged.clone), descriptor: try ConfinementPlan.openFolder(staged.clone), access: .readWrite)
        #expect {
            try Run.confined(["/bin/true"], in: staged.scratch) { request in
                request.protectedFolders = [staged.state, staged.scratch.containers]
                request.folders.append(plain)
            }
        } throws: { error in
            guard case .usage(let message) = error as? SandboxError else { return false }
            return message.contains("grant CLONE") && message.contains("would expose sandboxed-run's own")
        }
        // A staged grant whose folder lies in the state: the folder is what is checked.
        let inside = staged.state + "/inside"
        #expect(mkdir(inside, 0o755) == 0)
        let folderInside = PathRule(grant: "INSIDE", path: FilePath(inside), descriptor: try ConfinementPlan.openFolder(inside), access: .readWrite,
                                    stagedIn: try ConfinementPlan.openFolder(staged.clone))
        #expect {
            try staged.run(["/bin/true"], rule: folderInside)
        } throws: { error in
            guard case .usage(let message) = error as? SandboxError else { return false }
            return message.contains("grant INSIDE (staged)") && message.contains("would expose sandboxed-run's own")
        }
        // A policy's system path on the clone: a policy error, as anywhere in the state.
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(.init(path: staged.clone, access: .readOnly))
        #expect {
            try Run.confined(["/bin/true"], in: staged.scratch, policy: policy) { request in staged.configure(&request, rule: try! staged.rule()) }
        } throws: { error in
            guard case .policy = error as? SandboxError else { return false }
            return true
        }
    }

    @Test(arguments: ["state", "around the state", "containers", "folder", "inside the folder", "around the folder"])
    func aCloneMustBeAFolderApart(place: String) throws {
        let staged = try Staged()
        let clone: String
        switch place {
        case "state": clone = staged.state
        case "around the state": clone = staged.scratch.path
        case "containers":
            clone = staged.scratch.containers + "/clone"
            try FileManager.default.createDirectory(atPath: clone, withIntermediateDirectories: true)
        case "folder": clone = staged.folder
        case "inside the folder": clone = staged.folder + "/d"
        default:
            clone = staged.scratch.path + "/around"
            #expect(mkdir(clone, 0o755) == 0)
            let inner = PathRule(grant: "WORK", path: FilePath(clone + "/work"), descriptor: try ConfinementPlan.openFolder(staged.folder),
                                 access: .readWrite, stagedIn: try ConfinementPlan.openFolder(clone))
            #expect(rename(staged.folder, clone + "/work") == 0)
            try expectRefused(inner, place: place, staged: staged)
            return
        }
        let rule = PathRule(grant: "WORK", path: FilePath(staged.folder), descriptor: try ConfinementPlan.openFolder(staged.folder), access: .readWrite,
                            stagedIn: try ConfinementPlan.openFolder(clone))
        try expectRefused(rule, place: place, staged: staged)
    }

    private func expectRefused(_ rule: PathRule, place: String, staged: Staged) throws {
        #expect {
            try staged.run(["/bin/true"], rule: rule)
        } throws: { error in
            guard case .usage(let message) = error as? SandboxError else { return false }
            return message.hasPrefix("grant WORK (staged): its clone")
        }
    }

    // MARK: Nesting

    /// A staged grant inside a read-only grant: its place shows the clone,
    /// writable, inside the outer grant's read-only bind.
    @Test(arguments: [nil, 65534] as [uid_t?]) func aStagedGrantInsideAnotherGrant(uid: uid_t?) throws {
        if try AsUser.delegate("StagedGrantTests/aStagedGrantInsideAnotherGrant", uid: uid) { return }
        let staged = try Staged(folder: "outer/work")
        let outer = staged.scratch.path + "/outer"
        let before = Self.tree(outer)
        let code = Attack.prelude + """
            outer, grant = sys.argv[1:3]
            attempt("write outer", lambda: open(outer + "/planted", "w"))
            attempt("write grant", lambda: open(grant + "/new.txt", "w").write("new\\n"))
            attempt("rename within", lambda: os.rename(grant + "/d", grant + "/x/d"))
            print(sorted(os.listdir(outer)), sorted(os.listdir(grant)))
            """
        let outerRule = PathRule(grant: "OUTER", path: FilePath(outer), descriptor: try ConfinementPlan.openFolder(outer), access: .readOnly)
        let outcome = try staged.run([Run.python, "-c", code, outer, staged.folder]) { $0.folders.insert(outerRule, at: 0) }
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        #expect(outcome.output == [
            "write outer EROFS", "write grant ok", "rename within ok", "['work'] ['a.txt', 'e', 'm', 'new.txt', 'p', 'x']",
        ], "\(outcome.stderr)")
        #expect(Self.tree(outer) == before)
        #expect(Self.read(staged.clone + "/new.txt") == "new\n" && Self.read(staged.clone + "/x/d/f") == "eff\n")
        AsUser.ran()
    }

    /// Inside a staged grant's place the view shows the clone: another
    /// rule there would stand for the folder. The launch stops, best effort too.
    @Test(arguments: ["a grant inside", "a staged grant inside", "the same folder"]) func aGrantInsideAStagedOneIsRefused(other: String) throws {
        let staged = try Staged()
        let path = other == "the same folder" ? staged.folder : staged.folder + "/d"
        let rule = other == "a staged grant inside"
            ? PathRule(grant: "INNER", path: FilePath(path), descriptor: try ConfinementPlan.openFolder(path), access: .readWrite,
                       stagedIn: try ConfinementPlan.openFolder(staged.clone + "/e"))
            : PathRule(grant: "INNER", path: FilePath(path), descriptor: try ConfinementPlan.openFolder(path), access: .readOnly)
        #expect {
            try staged.run(["/bin/sh", "-c", "echo ran > \"$HOME/ran\""]) { request in
                request.folders.append(rule)
                request.compatibility = .bestEffort
            }
        } throws: { error in
            guard case .viewUnavailable(let reason) = error as? SandboxError else { return false }
            return reason.contains("grant INNER") && reason.contains("grant WORK (staged)") && reason.contains("staged grant needs the private view")
        }
    }
}

/// One test again, as another user: the test bundle run by setpriv with a
/// filter that selects it, in a process of its own (the test runner is
/// root, and cannot change its uid without changing every thread's).
enum AsUser {
    static let variable = "SANDBOX_TEST_AS_USER"
    static let marker = "ran as uid "

    /// The process is such a run.
    static var inChild: Bool { ProcessInfo.processInfo.environment[variable] != nil }

    /// True when the caller is done: `uid` given and not this process's
    /// (the test then ran as `uid` in a process of its own and passed, or
    /// failed here), or no `uid` in a child, which runs only its own case.
    static func delegate(_ test: String, uid: uid_t?) throws -> Bool {
        guard let uid else { return inChild }
        if getuid() == uid { return false }
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let result = try Launcher.program(
            Launcher.setpriv(uid) + [exe, "--testing-library", "swift-testing", "--filter", "SandboxTests\\." + test],
            environment: [variable: String(uid), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SWIFT_BACKTRACE": "enable=no"], directory: "/var/tmp")
        #expect(result.status == 0 && result.stdout.contains(marker + String(uid)), "as uid \(uid):\n\(result.stdout)\n\(result.stderr)")
        return true
    }

    /// Said at the end of a test run as another user: the parent knows it ran.
    static func ran() {
        if inChild { print(marker + String(getuid())) }
    }
}
