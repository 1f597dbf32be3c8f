//! HTTPS: a PEM certificate chain and key read once at start, served with
//! rustls on the aws-lc-rs provider (the one reqwest already uses), HTTP/1.1
//! only. Each connection's handshake runs in that connection's own task
//! (the first read drives it), so a client that stalls mid-handshake holds
//! only itself up, and gives up after [`HANDSHAKE`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::http::ServeError;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// The certificate chain and private key files (PEM) of an HTTPS server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

fn bad(path: &Path, reason: impl Into<String>) -> ServeError {
    ServeError::Tls { path: path.to_path_buf(), reason: reason.into() }
}

/// Reads both files and builds the server's TLS settings; every problem
/// names the file it is in.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, ServeError> {
    // Read first, so a missing file is "cannot read", not "no PEM section".
    let cert_pem = std::fs::read(&files.cert).map_err(|e| bad(&files.cert, format!("cannot read it: {e}")))?;
    let key_pem = std::fs::read(&files.key).map_err(|e| bad(&files.key, format!("cannot read it: {e}")))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&files.cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(bad(&files.cert, "holds no `BEGIN CERTIFICATE` section"));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(&files.key, format!("not a PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted): {e}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&files.cert, format!("no TLS version to offer: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad(&files.key, format!("does not go with the certificate in {}: {e}", files.cert.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections speak TLS.
pub(crate) struct TlsListener {
    pub(crate) tcp: TcpListener,
    pub(crate) acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = Tls;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Tls, SocketAddr) {
        // The TCP accept loop is axum's own (it retries and backs off).
        let (tcp, addr) = axum::serve::Listener::accept(&mut self.tcp).await;
        let accept = self.acceptor.accept(tcp);
        let handshake = Box::pin(async move {
            tokio::time::timeout(HANDSHAKE, accept)
                .await
                .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake took too long")))
        });
        (Tls::Handshake(handshake), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

type Handshake = Pin<Box<dyn Future<Output = io::Result<TlsStream<TcpStream>>> + Send>>;

/// A connection that finishes its handshake on first use.
pub(crate) enum Tls {
    Handshake(Handshake),
    Ready(Box<TlsStream<TcpStream>>),
    Failed,
}

impl Tls {
    fn ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<&mut TlsStream<TcpStream>>> {
        if let Tls::Handshake(h) = self {
            match ready!(h.as_mut().poll(cx)) {
                Ok(stream) => *self = Tls::Ready(Box::new(stream)),
                Err(e) => {
                    // A plain-HTTP client or a bad handshake: the connection
                    // ends here, before any request is read.
                    *self = Tls::Failed;
                    return Poll::Ready(Err(e));
                }
            }
        }
        match self {
            Tls::Ready(s) => Poll::Ready(Ok(s)),
            _ => Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, "the TLS handshake failed"))),
        }
    }
}

impl AsyncRead for Tls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let stream = ready!(self.get_mut().ready(cx))?;
        Pin::new(stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let stream = ready!(self.get_mut().ready(cx))?;
        Pin::new(stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tls::Ready(s) => Pin::new(s.as_mut()).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tls::Ready(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let stream = ready!(self.get_mut().ready(cx))?;
        Pin::new(stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Tls::Ready(s) => s.is_write_vectored(),
            _ => false,
        }
    }
}
