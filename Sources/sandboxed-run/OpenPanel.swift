@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import SystemPackage

/// The client side of live grants, inside a sandbox: the library's
/// `SecurityScope` of the sandbox's broker, and exit codes for its answers.
enum BrokerClient {
    /// The sandbox's broker; 3 where there is none, 125 where the variable names no broker socket.
    static func scope(command: String) throws -> SecurityScope {
        do { return try SecurityScope.sandboxed() } catch {
            Console.error("\(command): \(error)")
            throw ExitCode(error == .noBroker ? 3 : 125)
        }
    }

    /// A refusal: the broker's message, and the exit code of its status
    /// (`resolve`'s codes for a bookmark not followed).
    static func fail(_ error: SecurityScopeError, command: String) -> ExitCode {
        Console.error("\(command): \(error)")
        return switch error {
        case .cancelled: ExitCode(1)
        case .noPicker: ExitCode(2)
        case .noBroker, .unavailable: ExitCode(3)
        case .refused: ExitCode(4)
        case .busy: ExitCode(5)
        case .notAccessing: ExitCode(6)
        case .unresolved(let status, _): ExitCode(status.exitCode)
        default: ExitCode(125)
        }
    }

    /// A path on stdout, and a newline.
    static func printPath(_ path: FilePath) throws {
        let line = path.bytes + [UInt8(ascii: "\n")]
        var offset = 0
        while offset < line.count {
            let written = line[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw ExitCode(125) }
            offset += written
        }
    }

    /// A bookmark file inside the sandbox: the command's own, so every link is
    /// followed (it reaches only what the command may); replaced atomically and synced.
    static func bookmarkFile(_ path: String) throws -> BookmarkFile {
        try BookmarkFile(path: Picking.absolute(path), trust: .everyLink())
    }

    static func readBookmark(_ path: String, command: String) throws -> [UInt8] {
        guard let bytes = try bookmarkFile(path).read() else {
            Console.error("\(command): \(path) does not exist: make a bookmark with open-panel -o")
            throw ExitCode(125)
        }
        guard !bytes.isEmpty, bytes.count <= LiveGrantRequest.maximumBookmark else {
            Console.error("\(command): \(path) is not a bookmark (\(bytes.count) bytes)")
            throw ExitCode(Int32(BookmarkStatus.invalid.exitCode))
        }
        return bytes
    }
}

/// `$SANDBOXED_RUN open-panel`, inside a sandbox: asks the broker for a
/// folder, which asks the person; prints where the command reaches it.
struct OpenPanel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open-panel",
        abstract: "Inside a sandbox: ask the person for a folder, and print the path at which the command now reaches it.",
        discussion: """
            Speaks to the launcher's broker through the descriptor in $SANDBOXED_RUN_BROKER_FD (see docs/live-grants.md), \
            which the sandbox has when its policy has com.apple.security.files.user-selected.read-only or .read-write; \
            the person is asked through run --picker, or else on the terminal the launcher relays, in the folder browser \
            of pick, with its keys (Space or Enter choose the highlighted folder, → opens it, c the folder listed; it \
            names the app and the access asked for; the command's output is held back meanwhile, and what is typed \
            never reaches the command). The folder is attached beneath /run/sandboxed-run/grants for as \
            long as the sandbox runs. With -o (the policy needs com.apple.security.files.bookmarks.app-scope), a bookmark \
            of the folder sealed for the app is written there, for start-accessing in this run or a later one. Exit codes: \
            0 granted (the path on stdout), 1 cancelled, 2 no picker and no terminal to ask with, 3 live grants unavailable in this \
            sandbox, 4 refused (the folder may not be granted, or attaching it failed), 5 too many requests, 125 any other \
            failure (the bookmark could not be written, say).
            """
    )

    @Flag(help: "Ask for read-only access.") var readOnly = false
    @Option(help: "Text the picker shows (escaped, and cut to 200 characters).") var prompt: String?
    @Option(name: .shortAndLong, help: "Write a bookmark of the folder here (replaced atomically).") var output: String?

    func run() throws {
        // Checked before the person is asked: a file that cannot be written loses nothing.
        let file = try output.map(BrokerClient.bookmarkFile)
        let panel = AppSandbox.OpenPanel(scope: try BrokerClient.scope(command: "open-panel"))
        panel.message = prompt ?? ""
        panel.readOnly = readOnly
        panel.createsBookmark = output != nil
        let url: SecurityScopedURL
        do {
            guard let chosen = try panel.runModal() else { throw BrokerClient.fail(.cancelled, command: "open-panel") }
            url = chosen
            if let file { try file.replace(with: try url.bookmarkData()) }
        } catch let error as SecurityScopeError { throw BrokerClient.fail(error, command: "open-panel") }
        try BrokerClient.printPath(url.path)
    }
}

/// `$SANDBOXED_RUN start-accessing BOOKMARK`, inside a sandbox.
struct StartAccessing: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "start-accessing",
        abstract: "Inside a sandbox: make the folder of a bookmark of this app's reachable now, and print where.",
        discussion: """
            The broker resolves the bookmark for the sandbox's app as resolve does and attaches its folder beneath \
            /run/sandboxed-run/grants; each start is counted, and stop-accessing ends one. The policy needs \
            com.apple.security.files.bookmarks.app-scope. A folder that moved is followed and the bookmark rewritten \
            with its new place. Exit codes: 0 reachable (the path on stdout), 3 unavailable in this sandbox, 4 refused, \
            5 too many, 10 reachable but the renewed bookmark could not be written, and resolve's: 11 replaced, \
            12 missing, 13 revoked, 14 wrong-app, 15 invalid, 16 covered, 17 inaccessible; 125 any other failure.
            """
    )

    @Argument(help: "The bookmark file.") var bookmark: String

    func run() throws {
        let blob = try BrokerClient.readBookmark(bookmark, command: "start-accessing")
        let scope = try BrokerClient.scope(command: "start-accessing")
        let started: StartedAccess
        do { started = try scope.startAccessing(bookmarkData: blob) } catch { throw BrokerClient.fail(error, command: "start-accessing") }
        try BrokerClient.printPath(started.path)
        if let renewed = started.renewedBookmarkData {
            do { try BrokerClient.bookmarkFile(bookmark).replace(with: renewed) } catch {
                Console.error("start-accessing: the folder moved, and \(bookmark) could not be rewritten with its new place: \(error)")
                throw ExitCode(Int32(BookmarkStatus.moved.exitCode))
            }
            Console.notice("the folder moved: \(bookmark) was rewritten with its new place")
        }
    }
}

/// `$SANDBOXED_RUN stop-accessing BOOKMARK`, inside a sandbox.
struct StopAccessing: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stop-accessing",
        abstract: "Inside a sandbox: end one start-accessing of a bookmark; at the last, its folder is unreachable again.",
        discussion: """
            Descriptors already open in the folder keep working. A folder an open panel gave stays for the run. \
            Exit codes: 0 done, 3 unavailable in this sandbox, 4 refused, 6 not accessing that bookmark, \
            15 not a bookmark of this app, 125 any other failure.
            """
    )

    @Argument(help: "The bookmark file.") var bookmark: String

    func run() throws {
        let blob = try BrokerClient.readBookmark(bookmark, command: "stop-accessing")
        let scope = try BrokerClient.scope(command: "stop-accessing")
        do { try scope.stopAccessing(bookmarkData: blob) } catch { throw BrokerClient.fail(error, command: "stop-accessing") }
    }
}
