import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// Renames and hard links: free within one writable folder, refused between
/// two (no link may outlive a grant) and out of a read-only folder into a
/// writable one, whichever way metadata changes are enforced: under the
/// keeper's read-only mounts, where each writable folder is a mount of its
/// own, and under the supervisor, where they share the host's mounts.
@Suite(.inBothViews) struct ReparentingTests {
    enum Mode: String, CaseIterable, CustomTestStringConvertible {
        case readOnlyMounts, supervised
        var testDescription: String { rawValue }
    }

    /// Runs `command` in `mode` with `folders` granted; output on pipes.
    static func run(
        _ command: [String], in scratch: Scratch, mode: Mode, folders: [(String, String, Policy.PathAccess)] = [],
        features: KernelFeatures? = nil, policy: Policy = .defaultPolicy
    ) throws -> Outcome {
        let (outcome, namespaces) = try ReadOnlyMountsTests.confined(command, in: scratch, features: features) { request in
            request.policy = policy
            request.readOnlyMounts = mode == .readOnlyMounts
            if features != nil { request.compatibility = .bestEffort }
            request.folders = folders.map { name, path, access in
                PathRule(grant: name, path: FilePath(path), descriptor: try! ConfinementPlan.openVerified(path), access: access)
            }
        }
        switch mode {
        case .readOnlyMounts where ConfinementPlan.internalInodesRefuseSetattr:
            #expect(namespaces.contains(.readOnlyMounts), "the launch fell back to the supervisor")
        case .readOnlyMounts: break  // a root launch before Linux 6.15 is always supervised
        case .supervised: #expect(!namespaces.contains(.readOnlyMounts))
        }
        return outcome
    }

    static func links(_ path: String) -> nlink_t {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_nlink : 0
    }

    @Test(arguments: Mode.allCases) func renamesAndLinksAcrossSubfoldersOfOneWritableFolderWork(mode: Mode) throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        #expect(mkdir(grant, 0o755) == 0)
        let code = Attack.prelude + """
            for top in (os.environ["HOME"] + "/Documents", sys.argv[1]):
                os.makedirs(top + "/a/sub"); os.makedirs(top + "/b"); os.makedirs(top + "/a/folder")
                open(top + "/a/x", "w").write("x")
                where = "container" if top != sys.argv[1] else "grant"
                attempt(where + " rename", lambda: os.rename(top + "/a/x", top + "/b/x"))
                attempt(where + " link", lambda: os.link(top + "/b/x", top + "/a/sub/x"))
                attempt(where + " folder", lambda: os.rename(top + "/a/folder", top + "/b/folder"))
                print(where, os.stat(top + "/a/sub/x").st_nlink)
            """
        let outcome = try Self.run([Run.python, "-c", code, grant], in: scratch, mode: mode, folders: [("GRANT", grant, .readWrite)])
        #expect(outcome.output == [
            "container rename ok", "container link ok", "container folder ok", "container 2",
            "grant rename ok", "grant link ok", "grant folder ok", "grant 2",
        ], "\(outcome.stderr)")
        #expect(Self.links(grant + "/b/x") == 2)
    }

    @Test(arguments: Mode.allCases) func toolsThatRenameAcrossFoldersWork(mode: Mode) throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        #expect(mkdir(grant, 0o755) == 0)
        var script = """
            set -e
            cd "$1"
            mkdir -p a b
            echo x > a/x
            ln a/x b/hard && echo ln ok
            python3 -c 'import os; os.rename("a/x", "b/x")' && echo python ok
            """
        let git = FileManager.default.isExecutableFile(atPath: "/usr/bin/git")
        if git {
            script += """

                export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
                git init -q repo && cd repo && mkdir src docs && echo y > src/y && git add src/y
                git mv src/y docs/y && echo git ok && cd ..
                """
        }
        let node = FileManager.default.isExecutableFile(atPath: "/usr/bin/node")
        if node {
            script += "\nnode -e 'require(\"fs\").renameSync(\"b/x\", \"a/x\")' && echo node ok"
        }
        let outcome = try Self.run(["/bin/sh", "-c", script, "sh", grant], in: scratch, mode: mode, folders: [("GRANT", grant, .readWrite)])
        var expected = ["ln ok", "python ok"]
        if git { expected.append("git ok") }
        if node { expected.append("node ok") }
        #expect(outcome.output == expected, "\(outcome.stderr)")
        #expect(outcome.termination == .exited(0))
    }

    /// The launcher as root and as an unprivileged user (whose keeper is in
    /// a user namespace, under the same layer): renames and links across
    /// the container's folders work, into the sandbox's own /dev/shm they
    /// do not (a mount of its own).
    @Test(arguments: [nil, 65534] as [uid_t?]) func asAnyUserRenamesWithinTheContainerWork(uid: uid_t?) throws {
        let code = Attack.prelude + """
            os.chdir(os.environ["HOME"])
            os.makedirs("a/sub"); os.makedirs("b"); open("a/x", "w").write("x")
            attempt("rename", lambda: os.rename("a/x", "b/x"))
            attempt("link", lambda: os.link("b/x", "a/sub/x"))
            attempt("folder", lambda: os.rename("a/sub", "b/sub"))
            attempt("into shm", lambda: os.link("b/x", "/dev/shm/x"))
            """
        let home = Launcher.Home(owner: uid ?? getuid())
        let result = try Launcher.run([Run.python, "-c", code], home: home, as: uid)
        #expect(result.output == ["rename ok", "link ok", "folder ok", "into shm EXDEV"], "\(result.stderr)")
    }

    /// Every way of moving or linking a file between the container and a
    /// read-write grant: none may leave a second name in the other folder.
    static let betweenFolders = Attack.prelude + """
        grant, vault = sys.argv[1], sys.argv[2]
        AT_FDCWD, RENAME_EXCHANGE, RENAME_NOREPLACE, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = -100, 2, 1, 0x400, 0x1000
        renameat2 = 276 if os.uname().machine == "aarch64" else 316
        os.chdir(os.environ["HOME"] + "/Documents")
        def fresh():  # unconfined, each attack works and moves things away: put them back
            for path in ("mine", grant + "/theirs"):
                if not os.path.exists(path): open(path, "w").write("x")
        fresh()
        os.mkdir("folder"); os.link("mine", "folder/link")
        attempt("link container>grant", lambda: os.link("mine", grant + "/l1"))
        attempt("link grant>container", lambda: os.link(grant + "/theirs", "l2"))
        attempt("rename container>grant", lambda: os.rename("mine", grant + "/r1")); fresh()
        attempt("rename grant>container", lambda: os.rename(grant + "/theirs", "r2")); fresh()
        attempt("folder holding a link", lambda: os.rename("folder", grant + "/folder"))
        report("exchange", libc.syscall(renameat2, AT_FDCWD, b"mine", AT_FDCWD, (grant + "/theirs").encode(), RENAME_EXCHANGE))
        report("noreplace", libc.syscall(renameat2, AT_FDCWD, b"mine", AT_FDCWD, (grant + "/nr").encode(), RENAME_NOREPLACE)); fresh()
        theirs = os.open(grant + "/theirs", os.O_RDONLY)
        def link_following(source, target):  # os.link calls link(2), which does not follow /proc/self/fd/N
            if libc.linkat(AT_FDCWD, source.encode(), AT_FDCWD, target.encode(), AT_SYMLINK_FOLLOW) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        attempt("proc fd grant>container", lambda: link_following("/proc/self/fd/%d" % theirs, "l3"))
        report("empty path grant>container", libc.linkat(theirs, b"", AT_FDCWD, b"l4", AT_EMPTY_PATH))
        temporary = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
        os.write(temporary, b"t")
        attempt("tmpfile proc fd>grant", lambda: link_following("/proc/self/fd/%d" % temporary, grant + "/t1"))
        report("tmpfile empty path>grant", libc.linkat(temporary, b"", AT_FDCWD, (grant + "/t2").encode(), AT_EMPTY_PATH))
        attempt("link vault>container", lambda: os.link(vault + "/doc", "l5"))
        attempt("rename vault>container", lambda: os.rename(vault + "/doc", "r5"))
        if not os.path.exists(vault + "/doc"): os.rename("r5", vault + "/doc")
        attempt("link vault>grant", lambda: os.link(vault + "/doc", grant + "/l6"))
        if "SANDBOX_APP_ID" in os.environ:  # never on the host's own files
            attempt("link /etc>container", lambda: os.link("/etc/passwd", "l7"))
            attempt("rename /etc>grant", lambda: os.rename("/etc/hostname", grant + "/r7"))
            open("/dev/shm/s", "w").write("s")
            attempt("link shm>container", lambda: os.link("/dev/shm/s", "l8"))
            attempt("link container>shm", lambda: os.link("mine", "/dev/shm/l9"))
        """

    @Test(arguments: Mode.allCases) func nothingMovesOrLinksBetweenFolders(mode: Mode) throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        let vault = scratch.path + "/vault"
        #expect(mkdir(grant, 0o755) == 0 && mkdir(vault, 0o755) == 0)
        scratch.file("grant/theirs", "g")
        scratch.file("vault/doc", "v")
        let outcome = try Self.run(
            [Run.python, "-c", Self.betweenFolders, grant, vault], in: scratch, mode: mode,
            folders: [("GRANT", grant, .readWrite), ("VAULT", vault, .readOnly)])
        let answers = Dictionary(uniqueKeysWithValues: outcome.output.compactMap { line -> (String, String)? in
            guard let space = line.lastIndex(of: " ") else { return nil }
            return (String(line[..<space]), String(line[line.index(after: space)...]))
        })
        for label in ["link container>grant", "link grant>container", "rename container>grant", "rename grant>container",
                      "folder holding a link", "exchange", "noreplace", "proc fd grant>container", "tmpfile proc fd>grant",
                      "link vault>container", "link vault>grant", "link /etc>container", "link shm>container", "link container>shm"] {
            #expect(answers[label] == "EXDEV", "\(label): \(answers[label] ?? "no answer") \(outcome.stderr)")
        }
        // linkat(AT_EMPTY_PATH) of a file the caller opened: EXDEV here,
        // refused before any folder is looked at on kernels that want CAP_DAC_READ_SEARCH.
        for label in ["empty path grant>container", "tmpfile empty path>grant"] {
            #expect(["EXDEV", "ENOENT", "EPERM"].contains(answers[label] ?? "no answer"), "\(label): \(answers[label] ?? "no answer")")
        }
        // Out of a read-only folder: its removal is refused (EACCES), unless
        // the folders are mounts apart (EXDEV comes first).
        for label in ["rename vault>container", "rename /etc>grant"] {
            #expect(["EXDEV", "EACCES"].contains(answers[label] ?? "no answer"), "\(label): \(answers[label] ?? "no answer")")
        }
        #expect(answers.count == 18, "\(outcome.output) \(outcome.stderr)")
        // Nothing has a second name, nothing moved.
        #expect(Self.links(grant + "/theirs") == 1)
        #expect(Self.links(vault + "/doc") == 1)
        let granted = Set((try? FileManager.default.contentsOfDirectory(atPath: grant)) ?? [])
        #expect(granted == ["theirs"])
    }

    /// The same attacks, unconfined, on one filesystem: the links they make are real.
    @Test func theAttacksWorkUnconfined() throws {
        let scratch = Scratch()
        let home = scratch.path + "/home"
        let grant = scratch.path + "/grant"
        let vault = scratch.path + "/vault"
        #expect(mkdir(home, 0o755) == 0 && mkdir(home + "/Documents", 0o755) == 0 && mkdir(grant, 0o755) == 0 && mkdir(vault, 0o755) == 0)
        scratch.file("grant/theirs", "g")
        scratch.file("vault/doc", "v")
        let outcome = try Run.unconfined([Run.python, "-c", Self.betweenFolders, grant, vault], environment: ["HOME": home])
        #expect(outcome.output.contains("link container>grant ok"), "\(outcome.output) \(outcome.stderr)")
        #expect(outcome.output.contains("link grant>container ok"))
        for label in ["rename container>grant", "rename grant>container", "folder holding a link", "exchange", "noreplace",
                      "proc fd grant>container", "empty path grant>container", "tmpfile proc fd>grant", "tmpfile empty path>grant",
                      "link vault>container", "rename vault>container", "link vault>grant"] {
            #expect(outcome.output.contains(label + " ok"), "\(label): \(outcome.output)")
        }
    }

    /// The ways around the rule a hostile command would try next: links
    /// through symlinks, whiteouts, new mounts, namespaces, io_uring.
    @Test(arguments: Mode.allCases) func theWaysAroundItAreClosed(mode: Mode) throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        #expect(mkdir(grant, 0o755) == 0 && mkdir(grant + "/sub", 0o755) == 0)
        scratch.file("grant/theirs", "g")
        let code = Attack.prelude + """
            grant = sys.argv[1]
            AT_FDCWD, AT_SYMLINK_FOLLOW, RENAME_WHITEOUT = -100, 0x400, 4
            arm = os.uname().machine == "aarch64"
            renameat2, open_tree, io_uring_setup = (276, 428, 425) if arm else (316, 428, 425)
            os.chdir(os.environ["HOME"] + "/Documents")
            open("mine", "w").write("c"); os.mkdir("dir"); os.mkdir("sub"); os.mkdir("mnt")
            os.symlink(grant + "/theirs", "to-theirs")
            report("link through a symlink", libc.linkat(AT_FDCWD, b"to-theirs", AT_FDCWD, b"l1", AT_SYMLINK_FOLLOW))
            report("whiteout into the grant", libc.syscall(renameat2, AT_FDCWD, b"mine", AT_FDCWD, (grant + "/w").encode(), RENAME_WHITEOUT))
            report("open_tree", libc.syscall(open_tree, AT_FDCWD, grant.encode(), 1))
            report("bind mount", libc.mount(grant.encode(), b"mnt", None, 4096, None))
            report("unshare", libc.unshare(0x10000000 | 0x20000))  # CLONE_NEWUSER | CLONE_NEWNS
            report("io_uring", libc.syscall(io_uring_setup, 8, ctypes.create_string_buffer(120)))
            attempt("move the grant itself", lambda: os.rename(grant, "grant"))
            attempt("a folder over one of the grant", lambda: os.rename("dir", grant + "/sub"))
            attempt("the symlink itself", lambda: os.link("to-theirs", "sub/link", follow_symlinks=False))
            print("symlink stays one", os.path.islink("sub/link"))
            """
        // The attack needs a link of the command's own: a policy that allows them.
        let outcome = try Self.run(
            [Run.python, "-c", code, grant], in: scratch, mode: mode, folders: [("GRANT", grant, .readWrite)], policy: .withLinks)
        let answers = Dictionary(uniqueKeysWithValues: outcome.output.compactMap { line -> (String, String)? in
            guard let space = line.lastIndex(of: " ") else { return nil }
            return (String(line[..<space]), String(line[line.index(after: space)...]))
        })
        #expect(answers["link through a symlink"] == "EXDEV", "\(outcome.output) \(outcome.stderr)")
        #expect(answers["whiteout into the grant"] == "EPERM")
        for label in ["open_tree", "bind mount", "unshare", "io_uring"] {
            #expect(["EPERM", "ENOSYS", "EACCES"].contains(answers[label] ?? "no answer"), "\(label): \(answers[label] ?? "no answer")")
        }
        // The grant's folder itself cannot leave its parent (not writable; under read-only mounts, a mount point).
        #expect(["EACCES", "EBUSY", "EXDEV"].contains(answers["move the grant itself"] ?? "no answer"))
        #expect(answers["a folder over one of the grant"] == "EXDEV")
        // A symlink is a name, not the file: linking it within the container is fine.
        #expect(answers["the symlink itself"] == "ok" && answers["symlink stays one"] == "True")
        #expect(Self.links(grant + "/theirs") == 1)
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: grant)) ?? []) == ["theirs", "sub"])
    }

    /// ABI 5 (IOCTL_DEV) without ABI 6: no keeper's layer, and the folders are still kept apart.
    @Test func withoutTheKeepersLayerTheFoldersStayApart() throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        let vault = scratch.path + "/vault"
        #expect(mkdir(grant, 0o755) == 0 && mkdir(vault, 0o755) == 0)
        scratch.file("grant/theirs", "g")
        scratch.file("vault/doc", "v")
        let abi5 = KernelFeatures(landlockABI: 5, seccompFilter: true, seccompUserNotification: true)
        let outcome = try Self.run(
            [Run.python, "-c", Self.betweenFolders, grant, vault], in: scratch, mode: .supervised,
            folders: [("GRANT", grant, .readWrite), ("VAULT", vault, .readOnly)], features: abi5)
        #expect(outcome.output.contains("link container>grant EXDEV"), "\(outcome.output) \(outcome.stderr)")
        #expect(outcome.output.contains("link grant>container EXDEV"))
        #expect(outcome.output.contains("tmpfile proc fd>grant EXDEV"))
        #expect(Self.links(grant + "/theirs") == 1)
    }

    @Test(arguments: Mode.allCases) func aFolderGrantedInsideAnotherTakesNothingFromIt(mode: Mode) throws {
        // OUTER holds INNER: a file of OUTER linked into INNER would be
        // reachable, and writable, in a later run granted INNER alone.
        // The other way the file stays within OUTER.
        let scratch = Scratch()
        let outer = scratch.path + "/outer"
        let inner = outer + "/inner"
        #expect(mkdir(outer, 0o755) == 0 && mkdir(inner, 0o755) == 0)
        scratch.file("outer/o", "o")
        scratch.file("outer/inner/i", "i")
        let code = Attack.prelude + """
            outer, inner = sys.argv[1], sys.argv[2]
            attempt("outer>inner", lambda: os.link(outer + "/o", inner + "/from-outer"))
            attempt("inner>outer", lambda: os.link(inner + "/i", outer + "/from-inner"))
            os.mkdir(inner + "/a"); os.mkdir(inner + "/b")
            attempt("within inner", lambda: os.rename(inner + "/i", inner + "/a/i"))
            """
        let outcome = try Self.run(
            [Run.python, "-c", code, outer, inner], in: scratch, mode: mode,
            folders: [("OUTER", outer, .readWrite), ("INNER", inner, .readWrite)])
        #expect(outcome.output == ["outer>inner EXDEV", "inner>outer ok", "within inner ok"], "\(outcome.stderr)")
        #expect(Self.links(outer + "/o") == 1)
    }

    /// Without IOCTL_DEV (Landlock ABI 4 and older) the folders cannot be
    /// kept apart by layers: with two of them nothing is moved into another
    /// folder at all, within one folder too. With one, renames are free.
    @Test func withoutIoctlRightsTwoWritableFoldersAllowNoReparenting() throws {
        let scratch = Scratch()
        let grant = scratch.path + "/grant"
        #expect(mkdir(grant, 0o755) == 0)
        scratch.file("grant/theirs", "g")
        let abi4 = KernelFeatures(landlockABI: 4, seccompFilter: true, seccompUserNotification: true)
        let code = Attack.prelude + """
            os.chdir(os.environ["HOME"] + "/Documents")
            run = "run-" + os.urandom(8).hex(); os.mkdir(run); os.chdir(run)
            os.mkdir("a"); os.mkdir("b"); open("a/x", "w").write("x")
            attempt("within", lambda: os.rename("a/x", "b/x"))
            if len(sys.argv) > 1:
                attempt("link grant>container", lambda: os.link(sys.argv[1] + "/theirs", "l"))
            """
        for mode in Mode.allCases {
            let two = try Self.run([Run.python, "-c", code, grant], in: scratch, mode: mode, folders: [("GRANT", grant, .readWrite)], features: abi4)
            #expect(two.output == ["within EXDEV", "link grant>container EXDEV"], "\(mode): \(two.stderr)")
            let one = try Self.run([Run.python, "-c", code], in: Scratch(), mode: mode, features: abi4)
            #expect(one.output == ["within ok"], "\(one.stderr)")
        }
        #expect(Self.links(grant + "/theirs") == 1)
    }

    @Test func oneLayerPerWritableFolderUpToTheBound() throws {
        let scratch = Scratch()
        func rules(_ count: Int, access: Policy.PathAccess = .readWrite) -> [PathRule] {
            (0..<count).map { index in
                let path = scratch.path + "/\(access.rawValue)-\(index)"
                mkdir(path, 0o755)
                return PathRule(grant: "F\(index)", path: FilePath(path), descriptor: try! ConfinementPlan.openVerified(path), access: access)
            }
        }
        let one = try ReparentingLayers(abi: 7, rules: rules(1) + rules(3, access: .readOnly))
        #expect(one.mode == .noLayersNeeded && one.layers.isEmpty)
        // The same folder twice is one folder.
        let twice = rules(1)
        let same = try ReparentingLayers(abi: 7, rules: twice + twice)
        #expect(same.mode == .noLayersNeeded)
        let three = try ReparentingLayers(abi: 7, rules: rules(3))
        #expect(three.mode == .separated && three.layers.count == 3)
        let bound = try ReparentingLayers(abi: 7, rules: rules(ReparentingLayers.maximumLayers))
        #expect(bound.mode == .separated && bound.layers.count == ReparentingLayers.maximumLayers)
        let beyond = try ReparentingLayers(abi: 7, rules: rules(ReparentingLayers.maximumLayers + 1))
        #expect(beyond.mode == .refused && beyond.layers.isEmpty && !beyond.allowsRefer)
        #expect(try ReparentingLayers(abi: 4, rules: rules(2)).mode == .refused)
        // The command's layer grants IOCTL_DEV nowhere, so the layers take nothing away.
        for access in [Landlock.FileAccess.readOnly, .readExecute, .readWrite] {
            #expect(!access.contains(.ioctlDev))
        }
    }
}
