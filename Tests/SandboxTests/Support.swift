import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// What a command printed and how it ended.
struct Outcome {
    let termination: Termination
    let stdout: String
    let stderr: String

    var output: [String] { stdout.split(separator: "\n").map(String.init) }
}

/// A scratch folder per test, removed afterwards: the host side of every attack.
final class Scratch {
    let path: String

    /// Where scratch folders go: not /tmp, which the private view replaces
    /// by a /tmp of its own (a grant there is tested on purpose, apart).
    static let base = "/var/tmp/"

    init() {
        path = Self.base + "sandboxed-run-tests-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// A folder opened and verified as a grant is, then renamed to
    /// NAME-original, and an impostor made at its name: the swap a
    /// launcher must not fall for.
    func folderSwappedAfterVerification(_ name: String) throws -> (path: String, verified: OwnedDescriptor) {
        let folder = path + "/" + name
        #expect(mkdir(folder, 0o755) == 0)
        let verified = try ConfinementPlan.openVerified(folder)
        #expect(rename(folder, folder + "-original") == 0)
        #expect(mkdir(folder, 0o755) == 0)
        return (folder, verified)
    }

    /// Where this test's app containers live.
    var containers: String { path + "/data" }

    @discardableResult
    func file(_ name: String, _ contents: String = "secret\n") -> String {
        let file = path + "/" + name
        _ = FileManager.default.createFile(atPath: file, contents: Data(contents.utf8))
        return file
    }
}

/// The view a confinement test runs in. Suites marked `.inBothViews` run
/// each test once per view (`SANDBOX_TEST_VIEWS=private` or `=host` runs
/// one of them, to tell which view a failure came from); everything else
/// runs in the default, private, view.
enum Views {
    @TaskLocal static var current: FileSystemView = .private

    static let tested: [FileSystemView] = {
        guard let names = ProcessInfo.processInfo.environment["SANDBOX_TEST_VIEWS"] else { return FileSystemView.allCases }
        return names.split(separator: ",").map { name in
            guard let view = FileSystemView(rawValue: String(name)) else { fatalError("SANDBOX_TEST_VIEWS: unknown view \(name)") }
            return view
        }
    }()

    /// What a call on a path outside everything the sandbox may use gets:
    /// in the private view the path does not exist; in the host view, `host`.
    static func outside(_ host: String) -> String { current == .private ? "ENOENT" : host }
}

/// Runs each test of a suite once per view in `Views.tested`.
struct BothViews: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    // Once per test case (a test without arguments has one).
    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? { test.isSuite || testCase == nil ? nil : self }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        for view in Views.tested {
            try await Views.$current.withValue(view) { try await function() }
        }
    }
}

extension Trait where Self == BothViews {
    /// Each test once in the private view, once in the host view.
    static var inBothViews: Self { BothViews() }
}

enum Run {
    static let python = "/usr/bin/python3"

    /// Runs `command` confined, capturing its output through files (a pipe
    /// could fill while the launcher serves the supervisor).
    static func confined(
        _ command: [String], in scratch: Scratch, policy: Policy = .defaultPolicy, app: String = "com.example.tests",
        configure: (inout LaunchRequest) -> Void = { _ in }
    ) throws -> Outcome {
        var request = LaunchRequest(
            app: try AppID(app), policy: policy, command: command, containerBase: scratch.containers, protectedFolders: [scratch.containers],
            hostEnvironment: ["LANG": "C.UTF-8", "SECRET_TOKEN": "hunter2"])
        request.view = Views.current
        configure(&request)
        let out = scratch.path + "/.stdout-" + UUID().uuidString
        let err = scratch.path + "/.stderr-" + UUID().uuidString
        let outFD = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let errFD = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let nullFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(outFD); close(errFD); close(nullFD) }
        if request.standardInput == 0 { request.standardInput = nullFD }
        request.standardOutput = outFD
        request.standardError = errFD
        let termination = try ConfinementPlan(request).launch().wait()
        return Outcome(termination: termination, stdout: read(out), stderr: read(err))
    }

    /// Python code run confined: the attacks are easiest to say in Python.
    static func confinedPython(
        _ code: String, in scratch: Scratch, policy: Policy = .defaultPolicy,
        configure: (inout LaunchRequest) -> Void = { _ in }
    ) throws -> Outcome {
        try confined([python, "-c", code], in: scratch, policy: policy, configure: configure)
    }

    /// The same command with no sandbox at all: proves the attack works, so
    /// that the confined run's failure means something.
    static func unconfined(_ command: [String], environment: [String: String]? = nil) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        if let environment { process.environment = environment }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let (stdout, stderr) = try readOutputs(out, err)
        process.waitUntilExit()
        let termination: Termination = process.terminationReason == .uncaughtSignal
            ? .signaled(process.terminationStatus) : .exited(process.terminationStatus)
        return Outcome(termination: termination, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    static func unconfinedPython(_ code: String) throws -> Outcome {
        try unconfined([python, "-c", code])
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}

/// Python that performs a syscall through ctypes and prints `ok` or the errno name.
enum Attack {
    static let prelude = """
        import ctypes, errno, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        def report(label, result):
            if result == -1 or result is None:
                print(label, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
            else:
                print(label, "ok")
        def attempt(label, action):
            try:
                action()
                print(label, "ok")
            except OSError as e:
                print(label, errno.errorcode.get(e.errno, e.errno))

        """
}

extension Policy {
    /// The writer policy with `org.sandboxed-run.files.symbolic-links` on:
    /// for tests whose command makes links to attack or exercise something else.
    static var withLinks: Policy {
        var policy = Policy.defaultPolicy
        policy.symbolicLinks = true
        return policy
    }

    /// The same as a plist file, for the CLI: the shipped writer with the key turned on.
    static func writeWriterWithLinks(to path: String) throws {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Policies/writer.plist")
        let text = try String(contentsOf: source, encoding: .utf8)
        let on = text.replacingOccurrences(
            of: "<key>org.sandboxed-run.files.symbolic-links</key>\n    <false/>", with: "<key>org.sandboxed-run.files.symbolic-links</key>\n    <true/>")
        precondition(on != text, "writer.plist no longer names org.sandboxed-run.files.symbolic-links")
        try on.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// The harness itself (`Run.unconfined`): a child that writes more to
/// stderr than a pipe holds before it ends its stdout completes; read
/// stdout first, it hung until `timeout` killed it (status 137 after 20 s).
@Suite struct HarnessTests {
    @Test func aProgramFillingStderrBeforeStdoutCompletes() throws {
        let loud = "head -c 204800 /dev/zero | tr '\\0' e >&2; echo out"
        let outcome = try Run.unconfined(["/usr/bin/timeout", "-s", "KILL", "20", "/bin/sh", "-c", loud])
        #expect(outcome.termination == .exited(0) && outcome.stdout == "out\n", "\(outcome.termination)")
        #expect(outcome.stderr.utf8.count == 204800)
    }
}

/// Reading a child's output in the tests' shared process. Foundation's
/// `readDataToEndOfFile()` traps on a read error, ending every test at once;
/// `readToEnd()` throws, failing one. And stdout and stderr are read
/// together: read one after the other, a child that fills the second pipe
/// (64 KiB) while the first is waited on never ends.
extension FileHandle {
    /// Everything until end of file.
    func readAll() throws -> Data { try readToEnd() ?? Data() }
}

/// The child's stdout and stderr, each to its end, read at the same time.
func readOutputs(_ out: Pipe, _ err: Pipe) throws -> (stdout: Data, stderr: Data) {
    final class Reading: @unchecked Sendable {
        var result: Result<Data, any Error> = .success(Data())
        let done = DispatchSemaphore(value: 0)
    }
    let reading = Reading()
    let errors = err.fileHandleForReading
    Thread {
        reading.result = Result { try errors.readAll() }
        reading.done.signal()
    }.start()
    let stdout = Result { try out.fileHandleForReading.readAll() }
    // A failed stdout read stops reading it: the child gets EPIPE rather than wait for us.
    if case .failure = stdout { try? out.fileHandleForReading.close() }
    reading.done.wait()  // the thread must not outlive `err`, whose descriptor is then closed
    return (try stdout.get(), try reading.result.get())
}
