import Foundation
import Testing
import SystemPackage
import CSyscalls
@testable import Sandbox

/// Metadata changes enforced by the keeper's read-only mounts: native inside
/// the writable folders, EROFS outside, by any name or descriptor; and the
/// supervisor whenever a descriptor of the command could reach a mount of
/// the host's, which no mount flag of ours covers.
@Suite(.inBothViews, .enabled(if: ConfinementPlan.internalInodesRefuseSetattr, "root on a kernel that lets root chmod anonymous inodes (before 6.15) is always supervised"))
struct ReadOnlyMountsTests {
    /// Runs `command` confined with stdout and stderr on pipes (read-only
    /// mounts need stdio that is no file of the host's); stdin is `input`,
    /// else /dev/null. Output must stay under a pipe's 64 KiB.
    static func confined(
        _ command: [String], in scratch: Scratch, input: CInt? = nil, features: KernelFeatures? = nil,
        configure: (inout LaunchRequest) -> Void = { _ in }
    ) throws -> (Outcome, ConfinedProcess.Namespaces) {
        var request = LaunchRequest(
            app: try AppID("com.example.tests"), policy: .defaultPolicy, command: command, containerBase: scratch.containers, protectedFolders: [scratch.containers],
            hostEnvironment: ["LANG": "C.UTF-8"])
        request.view = Views.current
        configure(&request)
        var out: [CInt] = [-1, -1]
        var err: [CInt] = [-1, -1]
        // Close-on-exec from the start: a program another test spawns
        // between pipe() and fcntl() would hold the write ends, and the
        // drain below would wait for it.
        #expect(csb_pipe_cloexec(&out) == 0 && csb_pipe_cloexec(&err) == 0)
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(out[0]); close(err[0]); close(null) }
        request.standardInput = input ?? null
        request.standardOutput = out[1]
        request.standardError = err[1]
        let process: ConfinedProcess
        do {
            process = try ConfinementPlan(request, features: features ?? .probe()).launch()
        } catch {
            close(out[1]); close(err[1])
            throw error
        }
        close(out[1]); close(err[1])
        let termination = try process.wait()
        func drain(_ fd: CInt) -> String {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count <= 0 { break }
                bytes += buffer[0..<count]
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        return (Outcome(termination: termination, stdout: drain(out[0]), stderr: drain(err[0])), process.namespaces)
    }

    static func mode(_ path: String) -> mode_t {
        var status = stat()
        return stat(path, &status) == 0 ? status.st_mode & 0o7777 : 0
    }

    @Test func changesAreNativeInsideAndRefusedOutsideByEveryName() throws {
        let scratch = Scratch()
        let outside = scratch.path + "/outside"
        #expect(mkdir(outside, 0o755) == 0)
        let victim = scratch.file("outside/victim", "x")
        chmod(victim, 0o600)
        let code = Attack.prelude + """
            out = sys.argv[1]
            os.makedirs("Documents", exist_ok=True)
            open("Documents/mine", "w").write("x")
            os.symlink(out + "/victim", "Documents/to-victim")
            attempt("chmod-inside", lambda: os.chmod("Documents/mine", 0o640))
            attempt("utime-inside", lambda: os.utime("Documents/mine", (5, 5)))
            attempt("chown-inside", lambda: os.chown("Documents/mine", os.getuid(), os.getgid()))
            attempt("setxattr-inside", lambda: os.setxattr("Documents/mine", "user.tag", b"x"))
            attempt("setuid-inside", lambda: os.chmod("Documents/mine", 0o4755))
            print("mode", oct(os.stat("Documents/mine").st_mode & 0o7777))
            shm = open("/dev/shm/mine", "w")
            attempt("chmod-shm", lambda: os.chmod("/dev/shm/mine", 0o600))
            attempt("chmod-outside", lambda: os.chmod(out + "/victim", 0o666))
            attempt("chmod-link", lambda: os.chmod("Documents/to-victim", 0o666))
            fd = os.open(out + "/victim", os.O_RDONLY)
            attempt("fchmod-outside", lambda: os.fchmod(fd, 0o666))
            attempt("chmod-proc-fd", lambda: os.chmod("/proc/self/fd/%d" % fd, 0o666))
            attempt("futimens-outside", lambda: os.utime(fd, (0, 0)))
            attempt("fsetxattr-outside", lambda: os.setxattr(fd, "user.tag", b"x"))
            attempt("fchown-outside", lambda: os.fchown(fd, os.getuid(), os.getgid()))
            folder = os.open(out, os.O_PATH)
            attempt("fchmodat-dirfd", lambda: os.chmod("victim", 0o666, dir_fd=folder))
            attempt("chmod-folder", lambda: os.chmod(out, 0o777))
            """
        let (confined, namespaces) = try Self.confined([Run.python, "-c", code, outside], in: scratch) {
            $0.policy = .withLinks
            $0.folders = [PathRule(grant: "OUT", path: FilePath(outside), descriptor: try! ConfinementPlan.openVerified(outside), access: .readOnly)]
        }
        #expect(namespaces.contains(.readOnlyMounts))
        #expect(confined.output == [
            "chmod-inside ok", "utime-inside ok", "chown-inside ok", "setxattr-inside ok",
            // The supervisor still takes set-ID modes, and drops the bits.
            "setuid-inside ok", "mode 0o755", "chmod-shm ok",
            "chmod-outside EROFS", "chmod-link EROFS", "fchmod-outside EROFS", "chmod-proc-fd EROFS",
            "futimens-outside EROFS", "fsetxattr-outside EROFS", "fchown-outside EROFS", "fchmodat-dirfd EROFS",
            "chmod-folder EROFS",
        ], "\(confined.stderr)")
        #expect(Self.mode(victim) == 0o600)
        #expect(Self.mode(outside) == 0o755)
        var times = stat()
        #expect(stat(victim, &times) == 0 && times.st_mtim.tv_sec > 5)
    }

    @Test func aFileOfTheHostsAsStdioKeepsTheSupervisor() throws {
        // `> file`: the command's stdout is on the host's mount, which is
        // writable; chmod("/proc/self/fd/1") would reach it whatever our
        // mounts say. So the supervisor decides, and refuses.
        let scratch = Scratch()
        let log = scratch.file("log", "")
        chmod(log, 0o600)
        let fd = open(log, O_WRONLY | O_APPEND | O_CLOEXEC)
        defer { close(fd) }
        let code = Attack.prelude + """
            attempt("chmod-proc-fd", lambda: os.chmod("/proc/self/fd/0", 0o666))
            attempt("fchmod", lambda: os.fchmod(0, 0o666))
            """
        // The log as stdin: stdout stays a pipe to read the answers from.
        let (confined, namespaces) = try Self.confined([Run.python, "-c", code], in: scratch, input: fd)
        #expect(!namespaces.contains(.readOnlyMounts))
        #expect(confined.output == ["chmod-proc-fd EPERM", "fchmod EPERM"], "\(confined.stderr)")
        #expect(Self.mode(log) == 0o600)
    }

    @Test(.enabled(if: getuid() == 0, "mknod needs root")) func aDeviceAsStdinIsOpenedAgainInTheNamespace() throws {
        // A device node of the host's (here a scratch copy of /dev/null) as
        // stdin: opened again by its name in the namespace, where its mount
        // is read-only, so that chmod of /proc/self/fd/0 cannot change it.
        let scratch = Scratch()
        let node = scratch.path + "/null"
        #expect(mknod(node, S_IFCHR | 0o666, dev_t((1 << 8) | 3)) == 0)
        chmod(node, 0o666)
        let fd = open(node, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        let code = Attack.prelude + """
            attempt("chmod-proc-fd", lambda: os.chmod("/proc/self/fd/0", 0o600))
            attempt("fchmod", lambda: os.fchmod(0, 0o600))
            print("read", repr(sys.stdin.read()))
            """
        let (confined, namespaces) = try Self.confined([Run.python, "-c", code], in: scratch, input: fd)
        if Views.current == .private {
            // Not in the private view, so not found again there: the supervisor decides.
            #expect(!namespaces.contains(.readOnlyMounts))
            #expect(confined.output == ["chmod-proc-fd EPERM", "fchmod EPERM", "read ''"], "\(confined.stderr)")
        } else {
            #expect(namespaces.contains(.readOnlyMounts))
            #expect(confined.output == ["chmod-proc-fd EROFS", "fchmod EROFS", "read ''"], "\(confined.stderr)")
        }
        #expect(Self.mode(node) == 0o666)
    }

    @Test func aFolderSwappedBeforeTheKeeperIsNotBound() throws {
        // The keeper opens each writable folder again by name in its
        // namespace; an impostor put there after the launcher verified the
        // folder is refused (ESTALE), and the supervisor takes over. The
        // private view stops the launch: it would hold the verified folder
        // at its new name while the command is told the old one.
        let scratch = Scratch()
        let (vault, verified) = try scratch.folderSwappedAfterVerification("vault")
        let launch = { () throws -> (Outcome, ConfinedProcess.Namespaces) in
            try Self.confined(
                ["/bin/sh", "-c", "chmod 777 '\(vault)' && echo impostor-changed; chmod 700 '\(vault)-original' && echo original-changed"],
                in: scratch
            ) {
                $0.folders = [PathRule(grant: "VAULT", path: FilePath(vault), descriptor: verified, access: .readWrite)]
            }
        }
        if Views.current == .private {
            #expect(throws: SandboxError.self) { try launch() }
        } else {
            let (confined, namespaces) = try launch()
            #expect(!namespaces.contains(.readOnlyMounts))
            #expect(confined.output == ["original-changed"], "\(confined.stderr)")
        }
        #expect(Self.mode(vault) == 0o755)
    }

    @Test func procIsReadOnly() throws {
        // A root command owns /proc's global entries; chmod of one would
        // change it for the whole host. (The mode asked for is the one it
        // has, so that nothing changes even where this failed.)
        let scratch = Scratch()
        let code = Attack.prelude + """
            attempt("chmod-proc-entry", lambda: os.chmod("/proc/version", os.stat("/proc/version").st_mode & 0o7777))
            attempt("write-dev-stdout", lambda: open("/dev/stdout", "w").write(""))
            """
        let (confined, namespaces) = try Self.confined([Run.python, "-c", code], in: scratch)
        #expect(namespaces.contains(.readOnlyMounts))
        #expect(confined.output == ["chmod-proc-entry EROFS", "write-dev-stdout ok"], "\(confined.stderr)")
    }

    @Test func askingForTheSupervisorGetsIt() throws {
        let scratch = Scratch()
        let victim = scratch.file("victim", "x")
        chmod(victim, 0o600)
        let code = Attack.prelude + """
            attempt("chmod-outside", lambda: os.chmod(sys.argv[1], 0o666))
            os.makedirs("Documents", exist_ok=True)
            open("Documents/mine", "w").write("x")
            attempt("chmod-inside", lambda: os.chmod("Documents/mine", 0o640))
            """
        let (confined, namespaces) = try Self.confined([Run.python, "-c", code, victim], in: scratch) { $0.readOnlyMounts = false }
        #expect(!namespaces.contains(.readOnlyMounts))
        #expect(namespaces.contains(.pidAndMount))
        #expect(confined.output == ["chmod-outside \(Views.outside("EPERM"))", "chmod-inside ok"], "\(confined.stderr)")
        #expect(Self.mode(victim) == 0o600)
    }
}
