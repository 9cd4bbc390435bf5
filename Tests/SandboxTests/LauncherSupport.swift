import Foundation
import Testing

/// The built `sandboxed-run` launcher, run as its own process: for attacks
/// that would take the test runner down with the launcher if they worked,
/// and for launches by an unprivileged user (the test runner is root, and
/// cannot change its own uid without changing every thread's).
enum Launcher {
    /// Built next to the test bundle by `swift build --build-tests` / `swift test`.
    static let binary: String = {
        // SANDBOXED_RUN_UNDER_TEST: another build, e.g. scripts/build-release's static one.
        if let other = ProcessInfo.processInfo.environment["SANDBOXED_RUN_UNDER_TEST"] { return other }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("sandboxed-run").path
    }()

    /// A scratch HOME (and XDG folders) for one launcher, owned by `uid`.
    final class Home {
        let path = Scratch.base + "sandboxed-run-launcher-" + UUID().uuidString
        init(owner uid: uid_t = getuid()) {
            try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            chown(path, uid, gid_t(uid))
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        var environment: [String: String] {
            ["XDG_DATA_HOME": path + "/data", "XDG_STATE_HOME": path + "/state", "XDG_RUNTIME_DIR": path + "/run", "HOME": path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        }
    }

    struct Result {
        /// The launcher's exit status, 128 + N for death by signal N.
        let status: Int32
        let stdout: String
        let stderr: String
        var output: [String] { stdout.split(separator: "\n").map(String.init) }
    }

    /// `sandboxed-run run --app APP -- command...`, as `uid` when given (setpriv).
    static func run(_ command: [String], home: Home, app: String = "com.example.launcher", as uid: uid_t? = nil, options: [String] = []) throws -> Result {
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the launcher first: swift build")
        let view = options.contains { $0 == "--view" || $0.hasPrefix("--view=") } ? [] : ["--view", Views.current.rawValue]
        let launch = [binary, "run", "--app", app] + view + options + ["--"] + command
        return try program(uid.map { setpriv($0) + launch } ?? launch, environment: home.environment, directory: home.path)
    }

    /// Any program, unconfined; output goes through files, so no pipe can fill up.
    static func program(_ command: [String], environment: [String: String]? = nil, directory: String? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        if let environment { process.environment = environment }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Scratch.base + "sandboxed-run-out-" + UUID().uuidString
        let err = out + ".err"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: out); try? FileManager.default.removeItem(atPath: err) }
        process.standardOutput = FileHandle(forWritingAtPath: out)
        process.standardError = FileHandle(forWritingAtPath: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Result(
            status: status, stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
    }

    static func setpriv(_ uid: uid_t) -> [String] {
        ["/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups"]
    }
}

/// Every file beneath `path` whose mode has S_ISUID, or S_ISGID on a non-directory.
func setIDFiles(beneath path: String) -> [String] {
    var found: [String] = []
    guard let walker = FileManager.default.enumerator(atPath: path) else { return ["cannot list \(path)"] }
    while let name = walker.nextObject() as? String {
        var status = stat()
        guard lstat(path + "/" + name, &status) == 0 else { continue }
        let isDirectory = status.st_mode & S_IFMT == S_IFDIR
        if status.st_mode & S_ISUID != 0 || (!isDirectory && status.st_mode & S_ISGID != 0) { found.append(name) }
    }
    return found.sorted()
}
