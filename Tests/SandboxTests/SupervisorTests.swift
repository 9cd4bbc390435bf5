import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// The supervisor against a hostile app: attribute reads, hostile
/// arguments, names it must not reveal, and descriptors named by path.
@Suite(.inBothViews) struct SupervisorTests {
    // MARK: Extended attributes

    @Test func attributesOfFilesOutsideCannotBeRead() throws {
        // A browser records where a download came from; Landlock does not
        // mediate reading it.
        let scratch = Scratch()
        let download = scratch.file("statement.pdf")
        try HostileAppFilterTests.setOrigin(of: download)
        let code = Attack.prelude + """
            path = sys.argv[1]
            def show(label, action):
                try:
                    print(label, action())
                except OSError as e:
                    print(label, errno.errorcode[e.errno])
            show("getxattr", lambda: os.getxattr(path, "user.xdg.origin.url"))
            show("lgetxattr", lambda: os.getxattr(path, "user.xdg.origin.url", follow_symlinks=False))
            show("listxattr", lambda: os.listxattr(path))
            show("llistxattr", lambda: os.listxattr(path, follow_symlinks=False))
            os.makedirs("Documents", exist_ok=True)
            os.symlink(path, "Documents/link")
            show("through-link", lambda: os.getxattr("Documents/link", "user.xdg.origin.url"))
            show("the-link-itself", lambda: os.getxattr("Documents/link", "user.xdg.origin.url", follow_symlinks=False))
            """
        let unconfined = try Run.unconfined(["/bin/sh", "-c", "cd '\(scratch.path)' && exec \"$0\" -c \"$1\" \"$2\"", Run.python, code, download])
        #expect(unconfined.output.prefix(2) == ["getxattr b'https://example.com/x'", "lgetxattr b'https://example.com/x'"], "\(unconfined.stderr)")
        let confined = try Run.confined([Run.python, "-c", code, download], in: scratch, policy: .withLinks)
        // In the private view the reads are native: the file does not exist there.
        let refused = Views.outside("EACCES")
        #expect(confined.output == [
            "getxattr \(refused)", "lgetxattr \(refused)", "listxattr \(refused)", "llistxattr \(refused)", "through-link \(refused)",
            "the-link-itself ENODATA",
        ], "\(confined.stderr)")
    }

    // MARK: Names resolved in two steps

    @Test func everySpellingOfANameIsCheckedWhereItLeads() throws {
        // The supervisor opens a name's folder, then the last name in that
        // folder, and starts the beneath check from the folder: each spelling
        // that leads outside (a linked folder, "..", ".", a trailing slash, a
        // link as the last name, a dirfd) is refused; those inside work.
        let scratch = Scratch()
        let outside = scratch.path + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        let victim = outside + "/victim"
        _ = FileManager.default.createFile(atPath: victim, contents: Data("x".utf8))
        chmod(victim, 0o600)
        chmod(outside, 0o755)
        let code = Attack.prelude + """
            out = sys.argv[1]
            os.makedirs("Documents/sub", exist_ok=True)
            open("Documents/sub/mine", "w").write("x")
            os.symlink(out, "Documents/away")
            os.symlink(out + "/victim", "Documents/sub/to-victim")
            os.symlink("mine", "Documents/sub/to-mine")
            away = os.open("Documents/away", os.O_PATH)
            sub = os.open("Documents/sub", os.O_PATH)
            climb = os.path.relpath(out + "/victim")
            for label, path, kw in [
                    ("linked-folder", "Documents/away/victim", {}), ("climb", climb, {}),
                    ("dot", "Documents/away/.", {}), ("slash", "Documents/away/", {}),
                    ("dotdot", "Documents/away/..", {}), ("link-last", "Documents/sub/to-victim", {}),
                    ("dirfd", "victim", {"dir_fd": away}), ("dirfd-climb", "../away/victim", {"dir_fd": sub}),
                    ("inside", "Documents/sub/mine", {}), ("link-inside", "Documents/sub/to-mine", {}),
                    ("inside-dotdot", "Documents/sub/../sub/mine", {}), ("inside-dot", "Documents/sub/.", {}),
                    ("inside-slash", "Documents/sub/", {}), ("inside-dirfd", "mine", {"dir_fd": sub})]:
                attempt("chmod-" + label, lambda: os.chmod(path, 0o777 if "inside" not in label else 0o755, **kw))
            attempt("utime-climb", lambda: os.utime(climb, (0, 0)))
            attempt("chown-linked-folder", lambda: os.chown("Documents/away/victim", os.getuid(), os.getgid()))
            attempt("lchown-link-itself", lambda: os.chown("Documents/sub/to-victim", os.getuid(), os.getgid(), follow_symlinks=False))
            attempt("setxattr-climb", lambda: os.setxattr(climb, "user.tag", b"x"))
            """
        // In the private view the folder outside exists only as a read-only
        // grant: every spelling still reaches the supervisor, which refuses.
        let confined = try Run.confined([Run.python, "-c", code, outside], in: scratch, policy: .withLinks) { request in
            if Views.current == .private {
                request.folders = [PathRule(grant: "OUTSIDE", path: FilePath(outside), descriptor: try! ConfinementPlan.openVerified(outside), access: .readOnly)]
            }
        }
        #expect(confined.output == [
            "chmod-linked-folder EPERM", "chmod-climb EPERM", "chmod-dot EPERM", "chmod-slash EPERM",
            "chmod-dotdot EPERM", "chmod-link-last EPERM", "chmod-dirfd EPERM", "chmod-dirfd-climb EPERM",
            "chmod-inside ok", "chmod-link-inside ok", "chmod-inside-dotdot ok", "chmod-inside-dot ok",
            "chmod-inside-slash ok", "chmod-inside-dirfd ok",
            "utime-climb EPERM", "chown-linked-folder EPERM", "lchown-link-itself ok", "setxattr-climb EPERM",
        ], "\(confined.stderr)")
        let after = try FileManager.default.attributesOfItem(atPath: victim)
        #expect(after[.posixPermissions] as? Int == 0o600)
        #expect((after[.modificationDate] as? Date).map { $0.timeIntervalSince1970 > 0 } == true)
        #expect(try FileManager.default.attributesOfItem(atPath: outside)[.posixPermissions] as? Int == 0o755)
        #expect(try FileManager.default.attributesOfItem(atPath: scratch.path)[.posixPermissions] as? Int != 0o777)
    }

    @Test func deepFoldersAreCheckedToTheirTop() throws {
        // The beneath check walks up in steps of 64 folders: a file 300
        // levels down in the container is in reach, one 300 levels down
        // outside is not, by any spelling.
        let scratch = Scratch()
        var outside = scratch.path + "/outside"
        for _ in 0..<300 { outside += "/d" }
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let victim = outside + "/victim"
        _ = FileManager.default.createFile(atPath: victim, contents: Data("x".utf8))
        chmod(victim, 0o600)
        let code = Attack.prelude + """
            deep = "Documents/" + "d/" * 300
            os.makedirs(deep)
            open(deep + "mine", "w").write("x")
            attempt("inside", lambda: os.chmod(deep + "mine", 0o640))
            attempt("inside-folder", lambda: os.chmod(deep, 0o700))
            # The container is 60 to 70 levels up: each side of a step of the walk.
            edges = []
            for depth in range(60, 71):
                os.makedirs("Documents/e%d/" % depth + "e/" * (depth - 2), exist_ok=True)
                name = "Documents/e%d/" % depth + "e/" * (depth - 2) + "f"
                open(name, "w").write("x")
                try:
                    os.chmod(name, 0o640)
                except OSError as e:
                    edges.append((depth, errno.errorcode[e.errno]))
            print("edges", edges)
            attempt("outside", lambda: os.chmod(sys.argv[1], 0o777))
            attempt("outside-folder", lambda: os.chmod(os.path.dirname(sys.argv[1]), 0o777))
            os.chdir(deep)
            attempt("inside-from-there", lambda: os.utime("mine", (0, 0)))
            attempt("outside-from-there", lambda: os.utime(os.path.relpath(sys.argv[1]), (0, 0)))
            """
        let confined = try Run.confined([Run.python, "-c", code, victim], in: scratch)
        let outsideAnswer = Views.outside("EPERM")
        #expect(confined.output == [
            "inside ok", "inside-folder ok", "edges []", "outside \(outsideAnswer)", "outside-folder \(outsideAnswer)", "inside-from-there ok",
            "outside-from-there \(outsideAnswer)",
        ], "\(confined.stderr)")
        #expect(try FileManager.default.attributesOfItem(atPath: victim)[.posixPermissions] as? Int == 0o600)
    }

    @Test func attributesInReachReadExactlyAsTheKernelAnswers() throws {
        // The same calls on a file in reach: the supervisor's answers match
        // the kernel's, byte for byte and errno for errno.
        let code = Attack.prelude + """
            libc.getxattr.restype = ctypes.c_ssize_t
            libc.listxattr.restype = ctypes.c_ssize_t
            libc.syscall.restype = ctypes.c_long
            os.chdir(sys.argv[1])
            open("note", "w").write("x")
            os.setxattr("note", "user.tag", b"blue")
            os.setxattr("note", "user.empty", b"")
            buffer = ctypes.create_string_buffer(64)
            report("size-0", libc.getxattr(b"note", b"user.tag", None, 0)); print(libc.getxattr(b"note", b"user.tag", None, 0))
            report("too-small", libc.getxattr(b"note", b"user.tag", buffer, 2))
            print("value", libc.getxattr(b"note", b"user.tag", buffer, 64), buffer.raw[:4])
            print("huge-size", libc.syscall(191, b"note", b"user.tag", buffer, 1 << 63))
            print("empty", libc.getxattr(b"note", b"user.empty", buffer, 64))
            report("missing", libc.getxattr(b"note", b"user.none", buffer, 64))
            report("null-buffer", libc.getxattr(b"note", b"user.tag", None, 64))
            report("unmapped-buffer", libc.syscall(191, b"note", b"user.tag", 4096, 64))
            report("long-name", libc.getxattr(b"note", b"user." + b"n" * 300, buffer, 64))
            report("empty-name", libc.getxattr(b"note", b"", buffer, 64))
            report("no-file", libc.getxattr(b"absent", b"user.tag", buffer, 64))
            names = ctypes.create_string_buffer(256)
            length = libc.listxattr(b"note", names, 256)
            print("list", sorted(names.raw[:length].split(b"\\0")[:-1]), libc.listxattr(b"note", None, 0) == length)
            report("list-too-small", libc.listxattr(b"note", names, 3))
            fd = os.open("note", os.O_RDONLY)
            print("fgetxattr", os.getxattr(fd, "user.tag"))
            path_fd = os.open("note", os.O_PATH)
            attempt("fgetxattr-o-path", lambda: os.getxattr(path_fd, "user.tag"))
            attempt("flistxattr-o-path", lambda: os.listxattr(path_fd))
            """
        let scratch = Scratch()
        let host = scratch.path + "/host"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: false)
        let unconfined = try Run.unconfined([Run.python, "-c", code, host])
        let confined = try Run.confined([Run.python, "-c", code, "Documents"], in: scratch)
        #expect(unconfined.output.count == 17, "\(unconfined.stderr)")
        #expect(confined.output == unconfined.output, "\(confined.stderr)")
        #expect(confined.output.last == "flistxattr-o-path EBADF")
    }

    @Test func systemFilesAttributesAreReadable() throws {
        // Readable system paths answer (ENODATA: /usr files carry none here).
        let code = Attack.prelude + """
            attempt("usr", lambda: os.getxattr("/usr/bin/true", "user.none"))
            attempt("list", lambda: os.listxattr("/usr/bin/true"))
            attempt("etc-shadow", lambda: os.listxattr("/etc/shadow"))
            """
        #expect(try Run.confinedPython(code, in: Scratch()).output == ["usr ENODATA", "list ok", "etc-shadow \(Views.outside("EACCES"))"])
    }

    @Test func withoutASupervisorAttributeReadsAreNotSupported() throws {
        // A kernel without user notification: in the host view attribute
        // reads answer EOPNOTSUPP, which ls and cp take as "no attributes
        // here"; in the private view they need no supervisor (ENODATA: none).
        let scratch = Scratch()
        var request = LaunchRequest(
            app: try AppID("com.example.tests"), policy: .defaultPolicy,
            command: ["/bin/sh", "-c", ": > Documents/f && ls -l Documents/f >/dev/null && echo listed; \(Run.python) -c 'import os; os.getxattr(\"Documents/f\", \"user.x\")' 2>&1 | tail -1"],
            containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: [:])
        request.compatibility = .bestEffort
        request.view = Views.current
        let out = scratch.path + "/out"
        let fd = open(out, O_WRONLY | O_CREAT, 0o600)
        defer { close(fd) }
        request.standardOutput = fd
        request.standardError = fd
        let features = KernelFeatures(landlockABI: 7, seccompFilter: true, seccompUserNotification: false)
        _ = try ConfinementPlan(request, features: features).launch().wait()
        let output = try String(contentsOfFile: out, encoding: .utf8)
        let answer = Views.current == .private ? "[Errno 61] No data available" : "[Errno 95] Operation not supported"
        #expect(output == "listed\nOSError: \(answer): 'Documents/f'\n", "\(output)")
    }

    // MARK: Hostile arguments

    /// Every supervised syscall, by its x86-64 number, with extreme and
    /// random arguments; then one ordinary chmod that must still be served.
    static let fuzzer = Attack.prelude + """
        import mmap, random
        libc.syscall.restype = ctypes.c_long
        libc.syscall.argtypes = [ctypes.c_long] + [ctypes.c_uint64] * 6
        random.seed(int(sys.argv[1]))
        supervised = {"chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132,
                      "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191, "lgetxattr": 192,
                      "listxattr": 194, "llistxattr": 195, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
                      "utimes": 235, "inotify_add_watch": 254, "fchownat": 260, "futimesat": 261, "fchmodat": 268,
                      "utimensat": 280, "fchmodat2": 452}
        os.makedirs("Documents", exist_ok=True)
        open("Documents/f", "w").write("x")
        keep = []
        def address(data):
            data = bytes(data)
            buffer = ctypes.create_string_buffer(data, len(data)); keep.append(buffer)
            return ctypes.addressof(buffer)
        # A string running into an unmapped page: the last bytes of a page, no NUL.
        area = mmap.mmap(-1, 2 * mmap.PAGESIZE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        area.write(b"A" * (2 * mmap.PAGESIZE))
        libc.munmap(ctypes.c_void_p(base + mmap.PAGESIZE), mmap.PAGESIZE)
        edge = base + mmap.PAGESIZE - 16
        extreme = [0, 1, 2**63, 2**63 - 1, 2**64 - 1, 2**32, 2**32 - 1, 2**31, 4096, 0xFFFFFFFFFFFFF000, edge,
                   address(b"Documents/f\\0"), address(b"/proc/self/fd/3\\0"), address(b"user.tag\\0"),
                   address(b"A" * 5000 + b"\\0"),
                   address((ctypes.c_int64 * 4)(2**63 - 1, 2**63 - 1, -(2**63), -(2**63))),  # huge tv_usec / tv_nsec
                   address((ctypes.c_int64 * 4)(-1, -1, 2**62, 999999999)),
                   address((ctypes.c_uint64 * 4)(2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1))]
        inotify = libc.inotify_init1(0)
        extreme += [inotify, 2**32 + inotify]
        calls = failed = 0
        for name, number in supervised.items():
            rounds = [[value] * 6 for value in extreme] + [[random.choice(extreme) for _ in range(6)] for _ in range(250)]
            rounds += [[random.getrandbits(64) for _ in range(6)] for _ in range(50)]
            for args in rounds:
                failed += libc.syscall(number, *args) < 0
                calls += 1
        attempt("after", lambda: os.chmod("Documents/f", 0o600))
        print("calls", calls, "failed", failed)
        """

    @Test(.enabled(if: isX86_64)) func theLauncherSurvivesEveryArgument() throws {
        // Through the built launcher: a trap in the supervisor would kill it
        // (and, with it, this test runner, were it in-process).
        let home = Launcher.Home()
        let seed = String(UInt32.random(in: 0...UInt32.max))
        let result = try Launcher.run([Run.python, "-c", Self.fuzzer, seed], home: home)
        #expect(result.status == 0, "seed \(seed): \(result.stderr)")
        #expect(result.output.first == "after ok", "seed \(seed): \(result.stderr)")
        // Nearly every call is an error for the command; a few (chmod of Documents/f) succeed.
        let counts = (result.output.last ?? "").split(separator: " ").compactMap { Int($0) }
        #expect(counts.count == 2 && counts[0] > 7000 && counts[1] > counts[0] * 9 / 10, "\(result.output)")
        let container = home.path + "/data"
        #expect(setIDFiles(beneath: container).isEmpty)
    }

    // MARK: The child's powers

    @Test(.enabled(if: getuid() == 0)) func namesInAFolderTheChildCannotSearchStayHidden() throws {
        // A folder of another user, mode 0700, inside a writable grant: the
        // child (root without capabilities) may not search it, so whether a
        // name exists there must not show. With the launcher's capabilities
        // the supervisor found the file (EPERM: not the owner) and not the
        // missing one (ENOENT).
        let scratch = Scratch()
        let work = scratch.path + "/work", locked = work + "/locked"
        try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: true)
        scratch.file("work/locked/exists")
        #expect(chown(locked + "/exists", 65534, 65534) == 0 && chown(locked, 65534, 65534) == 0 && chmod(locked, 0o700) == 0)
        let code = Attack.prelude + """
            folder = sys.argv[1]
            for name in ("exists", "missing"):
                path = os.path.join(folder, name)
                attempt("stat-" + name, lambda: os.stat(path))
                attempt("chmod-" + name, lambda: os.chmod(path, 0o644))
                attempt("chown-" + name, lambda: os.chown(path, 0, 0))
                attempt("utime-" + name, lambda: os.utime(path))
                attempt("setxattr-" + name, lambda: os.setxattr(path, "user.x", b"1"))
                attempt("getxattr-" + name, lambda: os.getxattr(path, "user.x"))
                attempt("chmod-dotdot-" + name, lambda: os.chmod(os.path.join(folder, name, ".."), 0o755))
            """
        let grant = try ConfinementPlan.openVerified(work)
        let confined = try Run.confined([Run.python, "-c", code, locked], in: scratch) {
            $0.folders = [PathRule(grant: "WORK", path: FilePath(work), descriptor: grant, access: .readWrite)]
        }
        let answers = confined.output.map { $0.split(separator: " ").last.map(String.init) ?? "" }
        #expect(answers == Array(repeating: "EACCES", count: 14), "\(confined.output)")
        var status = stat()
        #expect(stat(locked, &status) == 0 && status.st_mode & 0o7777 == 0o700)
    }

    /// The supervisor finds a name as the command's call did, from the
    /// command's root: an absolute link met on a relative path leads into
    /// the command's own /dev/shm (never the host's), whose files are the
    /// command's to change, by any name.
    @Test func theSandboxsOwnSharedMemoryIsChangedByEveryName() throws {
        let scratch = Scratch()
        let code = Attack.prelude + """
            os.chdir(os.environ["HOME"])
            os.symlink("/dev/shm", "shm")
            open("/dev/shm/mine", "w").write("x")
            def mode(): return oct(os.stat("/dev/shm/mine").st_mode & 0o777)
            attempt("absolute", lambda: os.chmod("/dev/shm/mine", 0o600)); print(mode())
            attempt("through a link", lambda: os.chmod("shm/mine", 0o640)); print(mode())
            os.chdir("/dev/shm")
            attempt("relative", lambda: os.chmod("mine", 0o604)); print(mode())
            """
        let outcome = try Run.confined([Run.python, "-c", code], in: scratch, policy: .withLinks) { $0.readOnlyMounts = false }
        #expect(outcome.output == ["absolute ok", "0o600", "through a link ok", "0o640", "relative ok", "0o604"], "\(outcome.stderr)")
    }

    @Test func aNonDumpableChildKeepsItsMetadataChanges() throws {
        // Agents (ssh-agent, gpg-agent) make themselves non-dumpable; the
        // supervisor still reaches their /proc entries when root launches.
        let code = Attack.prelude + """
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
            open("Documents/f", "w").write("x")
            attempt("chmod", lambda: os.chmod("Documents/f", 0o600))
            fd = os.open("Documents/f", os.O_RDONLY)
            attempt("fchmod", lambda: os.fchmod(fd, 0o640))
            attempt("setxattr", lambda: os.setxattr("Documents/f", "user.tag", b"blue"))
            attempt("getxattr", lambda: print(os.getxattr(os.path.abspath("Documents/f"), "user.tag")))
            """
        let outcome = try Run.confinedPython(code, in: Scratch())
        #expect(outcome.output == (getuid() == 0
            ? ["chmod ok", "fchmod ok", "setxattr ok", "b'blue'", "getxattr ok"]
            : ["chmod EACCES", "fchmod EACCES", "setxattr EACCES", "getxattr EACCES"]), "\(outcome.stderr)")
    }

    // MARK: Descriptors named by path

    @Test func exactlyTheLiteralFormsNameTheChildsDescriptors() throws {
        let pid = getpid()
        // "/proc/thread-self" reads "PID/task/TID".
        let tid = pid_t(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self").split(separator: "/").last ?? "") ?? 0
        func parse(_ path: String, caller: pid_t = pid) throws -> String {
            guard let child = try CommandPaths.childDescriptor(named: Array(path.utf8CString), caller: caller) else { return "path" }
            return "\(child.process == pid ? "pid" : child.process == tid ? "tid" : "other") \(child.fd)"
        }
        #expect(try parse("/proc/self/fd/3") == "pid 3")
        #expect(try parse("/dev/fd/0") == "pid 0")
        #expect(try parse("/proc/\(pid)/fd/12") == "pid 12")
        if tid != pid {  // on a thread other than the main one
            #expect(try parse("/proc/thread-self/fd/7", caller: tid) == "tid 7")
            #expect(try parse("/proc/\(tid)/fd/7", caller: tid) == "tid 7")
            #expect(try parse("/proc/self/fd/7", caller: tid) == "pid 7")
        }
        #expect(try parse("/proc/self/fd/2147483647") == "pid 2147483647")
        #expect(try parse("/proc/self/fd/3\u{0}/x") == "pid 3")  // the kernel reads up to the NUL
        for path in ["/proc/self/fd/03", "/proc/self/fd/-1", "/proc/self/fd/+1", "/proc/self/fd/2147483648", "/proc/self/fd/",
                     "/proc/self/fd/3/", "/proc//self/fd/3", "proc/self/fd/3", "/proc/self/cwd", "/proc/1/fd/3",
                     "/proc/\(pid + 1)/fd/3", "/proc/0\(pid)/fd/3", "/dev/fd/3/x", "/dev//fd/3"] {
            #expect(try parse(path) == "path", "\(path)")
        }
    }

    @Test func tarRestoresFolderModesInTheContainer() throws {
        // GNU tar sets modes with fchmodat(AT_SYMLINK_NOFOLLOW), which glibc
        // turns into chmod("/proc/self/fd/N") of an O_PATH fd: refused as a
        // magic link, it left every folder 0700 ("Cannot change mode").
        let scratch = Scratch()
        let archive = scratch.path + "/shelf/notes.tar"
        let script = """
            set -e
            mkdir -p '\(scratch.path)/shelf' '\(scratch.path)/src/notes/2026/june'
            echo hi > '\(scratch.path)/src/notes/2026/june/day.md'
            chmod 755 '\(scratch.path)/src/notes' '\(scratch.path)/src/notes/2026' '\(scratch.path)/src/notes/2026/june'
            chmod 644 '\(scratch.path)/src/notes/2026/june/day.md'
            tar -C '\(scratch.path)/src' -cf '\(archive)' notes
            """
        #expect(try Run.unconfined(["/bin/sh", "-c", script]).termination == .exited(0))
        let grant = try ConfinementPlan.openVerified(scratch.path + "/shelf")
        let outcome = try Run.confined(["/bin/sh", "-c", "tar xf '\(archive)' && find notes -printf '%m %p\\n' | sort"], in: scratch) {
            $0.folders = [PathRule(grant: "SHELF", path: FilePath(scratch.path + "/shelf"), descriptor: grant, access: .readOnly)]
        }
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        #expect(outcome.stderr.isEmpty)
        #expect(outcome.output == ["644 notes/2026/june/day.md", "755 notes", "755 notes/2026", "755 notes/2026/june"])
    }

    @Test func theChildsDescriptorsByPathAndOnlyThose() throws {
        let scratch = Scratch()
        let outside = scratch.file("outside.txt")
        chmod(outside, 0o600)
        let code = Attack.prelude + """
            import threading
            libc.syscall.restype = ctypes.c_long
            os.chdir("Documents")
            open("f", "w").write("x")
            os.symlink("f", "link")
            def mode():
                return oct(os.stat("f").st_mode & 0o777)
            attempt("nofollow-file", lambda: os.chmod("f", 0o640, follow_symlinks=False)); print(mode())
            try:
                os.chmod("link", 0o777, follow_symlinks=False)
            except NotImplementedError:  # Python's word for EOPNOTSUPP here
                print("nofollow-symlink EOPNOTSUPP")
            path_fd = os.open("f", os.O_PATH)
            report("fchmodat2-empty-path", libc.syscall(452, path_fd, b"", 0o600, 0x1100)); print(mode())
            link_fd = os.open("link", os.O_PATH | os.O_NOFOLLOW)
            report("fchmodat2-symlink", libc.syscall(452, link_fd, b"", 0o600, 0x1100))
            report("fchmodat2-bad-flags", libc.syscall(452, -100, b"f", 0o600, 0x2))
            fd = os.open("f", os.O_RDONLY)
            forms = (("self", "/proc/self/fd/%d"), ("thread-self", "/proc/thread-self/fd/%d"), ("dev-fd", "/dev/fd/%d"),
                     ("pid", "/proc/" + str(os.getpid()) + "/fd/%d"))
            for index, (label, path) in enumerate(forms):
                attempt(label, lambda: os.chmod(path % fd, 0o600 + index)); print(mode())
            def from_thread():
                attempt("tid", lambda: os.chmod("/proc/%d/fd/%d" % (threading.get_native_id(), fd), 0o644)); print(mode())
            thread = threading.Thread(target=from_thread); thread.start(); thread.join()
            attempt("parent", lambda: os.chmod("/proc/%d/fd/%d" % (os.getppid(), fd), 0o600))
            attempt("leading-zero", lambda: os.chmod("/proc/self/fd/0%d" % fd, 0o600))
            attempt("double-slash", lambda: os.chmod("/proc//self/fd/%d" % fd, 0o600))
            attempt("cwd", lambda: os.chmod("/proc/self/cwd", 0o700))
            attempt("trailing-slash", lambda: os.chmod("/proc/self/fd/%d/" % fd, 0o600))
            try:
                outside = os.open(sys.argv[1], os.O_PATH)
                attempt("outside", lambda: os.chmod("/proc/self/fd/%d" % outside, 0o666))
                attempt("outside-dev-fd", lambda: os.chown("/dev/fd/%d" % outside, 0, 0))
                attempt("outside-xattr", lambda: os.getxattr("/proc/self/fd/%d" % outside, "user.x"))
            except FileNotFoundError:
                print("outside ENOENT")
            if sys.argv[2] != "confined": sys.exit()  # unconfined, that would chmod whatever this process inherited
            # Descriptors the child does not have, where the launcher has its own.
            answers = set()
            for number in range(3, 256):
                try:
                    os.fstat(number)
                    continue  # the child's own
                except OSError:
                    pass
                try:
                    os.chmod("/proc/self/fd/%d" % number, 0o777)
                    answers.add("ok")
                except OSError as e:
                    answers.add(errno.errorcode[e.errno])
            print("not the child's", sorted(answers))
            """
        let args = [Run.python, "-c", code, outside]
        // Unconfined, a /proc/self/fd path reaches any file the process has open.
        let unconfined = try Run.unconfined(["/bin/sh", "-c", "mkdir -p '\(scratch.path)/host/Documents' && cd '\(scratch.path)/host' && exec \"$@\"", "sh"] + args + ["unconfined"])
        #expect(unconfined.output.contains("outside ok"), "\(unconfined.stderr)")
        chmod(outside, 0o600)
        let confined = try Run.confined(args + ["confined"], in: scratch, policy: .withLinks)
        // The parent is the keeper: its /proc entry names its own descriptors,
        // never the child's; refused either way (ELOOP or ENOENT, as it holds
        // one or not; EACCES when it is pid 1 of the sandbox's namespace,
        // which the supervisor resolves as the host's pid 1; EPERM in the
        // private view, whose /proc hides the keeper from the command).
        let output = confined.output.map { ["parent ENOENT", "parent EACCES", "parent EPERM"].contains($0) ? "parent ELOOP" : $0 }
        #expect(output == [
            "nofollow-file ok", "0o640", "nofollow-symlink EOPNOTSUPP", "fchmodat2-empty-path ok", "0o600",
            "fchmodat2-symlink ENOTSUP", "fchmodat2-bad-flags EINVAL",
            "self ok", "0o600", "thread-self ok", "0o601", "dev-fd ok", "0o602", "pid ok", "0o603",
            // Other /proc forms are resolved in the command's own procfs, "self"
            // as the caller's own entry (as its kernel call did), where the
            // magic link is refused (ELOOP); a leading zero names no fd.
            "tid ok", "0o644", "parent ELOOP", "leading-zero ENOENT", "double-slash ELOOP", "cwd ELOOP", "trailing-slash ELOOP",
        ] + (Views.current == .private ? ["outside ENOENT"] : ["outside EPERM", "outside-dev-fd EPERM", "outside-xattr EACCES"]) + [
            "not the child's ['ENOENT']",
        ], "\(confined.stderr)")
        var status = stat()
        #expect(stat(outside, &status) == 0 && status.st_mode & 0o7777 == 0o600)
        let container = try AppContainer.current(for: AppID("com.example.tests"), base: scratch.containers)
        #expect(stat(container.root, &status) == 0 && status.st_mode & 0o777 != 0o777)
    }
}

let isX86_64: Bool = {
    #if arch(x86_64)
    true
    #else
    false
    #endif
}()
